"""Stops in flight: attempts the controller told to stop whose exit is not reported yet.
A pure state machine, `handle(state, event, now) -> effects`; no clock, no sockets.

Not the job kernel: to the kernel a stopped attempt is over at once (its task moves on), but
its process runs on through its grace period (10 s by default) and still holds its worker's
resources, so placement counts it (`by_worker`) until its worker reports it gone; a stop
still unanswered after its grace plus 5 s is sent again (repair.py reads `sent`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iris.base.resources import Resources


@dataclass
class StopState:
    # worker id -> attempt id -> the resources its process still holds there
    by_worker: dict[str, dict[str, Resources]] = field(default_factory=dict)
    # attempt id -> (when the stop was last sent, its grace), monotonic seconds
    sent: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class StopSent:
    """A stop command went to `worker_id`. `hold`: what the attempt holds there until it is
    gone; None for a stop sent again (the hold, if any, is unchanged)."""

    worker_id: str
    attempt_id: str
    grace_s: float
    hold: Resources | None = None


@dataclass(frozen=True)
class Stopped:
    """The attempt is gone: its exit was reported, or its worker no longer runs it."""

    attempt_id: str


@dataclass(frozen=True)
class WorkerGone:
    """The worker is gone, and its processes with it: nothing there is stopping any more."""

    worker_id: str


@dataclass(frozen=True)
class Freed:
    """Resources on `worker_id` are free again: placement has something new to use."""

    worker_id: str


def handle(state: StopState, event: StopSent | Stopped | WorkerGone,
           now: float) -> list[Freed]:
    if isinstance(event, StopSent):
        if event.hold is not None:
            state.by_worker.setdefault(event.worker_id, {})[event.attempt_id] = event.hold
        state.sent[event.attempt_id] = (now, event.grace_s)
        return []
    if isinstance(event, Stopped):
        state.sent.pop(event.attempt_id, None)
        for worker_id, attempts in list(state.by_worker.items()):
            if attempts.pop(event.attempt_id, None) is not None:
                if not attempts:
                    del state.by_worker[worker_id]
                return [Freed(worker_id)]
        return []
    if isinstance(event, WorkerGone):
        for attempt_id in state.by_worker.pop(event.worker_id, {}):
            state.sent.pop(attempt_id, None)
        return []
    raise TypeError(f"stops cannot handle {type(event).__name__}")
