"""Repairs from a worker's heartbeat: commands that were lost are sent again. Pure.

Not the kernel's Reconcile (run when a worker registers, where anything may have changed).
A start or stop command is one actor call; if it is lost (the call timed out under load,
the connection dropped), nothing else would ever repeat it and the attempt would sit
ASSIGNED, or keep its host while the controller waits for it to stop. So each heartbeat
carries the attempts the worker runs, and the controller compares: an ASSIGNED attempt
the worker still lacks after `start_after_s` is started again (starts are idempotent on
the worker by attempt id); an attempt told to stop that still runs after its grace plus
`stop_after_s` is told again; one that no longer runs has stopped; one the worker runs
that the controller neither wants nor is stopping is an orphan to stop.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from iris.controller.jobs.model import TaskState
from iris.controller.jobs.state import KernelState

# A start normally reaches its worker in milliseconds and the worker reports BUILDING at
# once; 10 s without either means the call was lost, not slow.
START_AFTER_S = 10.0
# On top of the grace period the stop asked for.
STOP_AFTER_S = 5.0


@dataclass
class Repairs:
    start_again: list[str] = field(default_factory=list)  # attempt ids
    stop_again: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # were stopping, no longer run
    orphans: list[str] = field(default_factory=list)  # run, but nobody wants them


def repairs(state: KernelState, worker_id: str, running: Collection[str],
            stopping: Collection[str], stop_sent: Mapping[str, tuple[float, float]],
            now_wall: float, now_mono: float) -> Repairs:
    """`stopping`: attempts told to stop on this worker; `stop_sent`: attempt -> (when the
    stop was sent, its grace), monotonic seconds."""
    out = Repairs()
    running = set(running)
    for attempt_id in sorted(state.by_worker.get(worker_id, ())):
        attempt = state.attempts[attempt_id]
        if (attempt.state is TaskState.ASSIGNED and attempt_id not in running
                and now_wall - attempt.assigned_at > START_AFTER_S):
            out.start_again.append(attempt_id)
    for attempt_id in sorted(stopping):
        if attempt_id not in running:
            out.stopped.append(attempt_id)
            continue
        sent_at, grace = stop_sent.get(attempt_id, (now_mono, 0.0))
        if now_mono - sent_at > grace + STOP_AFTER_S:
            out.stop_again.append(attempt_id)
    wanted = state.by_worker.get(worker_id, set())
    out.orphans = sorted(a for a in running if a not in wanted and a not in stopping)
    return out
