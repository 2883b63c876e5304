"""The worker's book of attempts: a pure kernel, `handle(book, event, now) -> (book, effects)`.

Not the processes (runner.py) and not the sockets (actor.py): no threads, no clock, no disk.
The Worker actor feeds it the controller's calls, what its executor found out, the
controller's acknowledgements and its ticks, on its own turn, and carries out the effects.
`now` is CLOCK_MONOTONIC seconds, the lease's clock (lease.py). The book is changed in place,
like the job kernel's state; a handler checks before it changes anything.

An attempt held by this worker goes

    from       event                     to        effects, updates queued
    -          Start, lease held         STARTING  BeginStart
    -          Start, lease lapsed       WAITING   (a start that raced the report whose
                                                    acknowledgement renews the lease)
    WAITING    LeaseRenewed              STARTING  BeginStart
    WAITING    Tick, FENCE_AFTER_S later gone      "preempted" (never started), Flush
    WAITING    Stop                      gone      "exited" 143 (never started), Flush
    STARTING   Phase building            STARTING  "building"
    STARTING   Phase running             RUNNING   "running" (+ BeginStop if a stop waits)
    STARTING   Stop                      STARTING  the stop waits until it runs
    RUNNING    Stop                      RUNNING   BeginStop
    STARTING   StartFailed               gone      "exited" with why, Flush
    any        Exited                    gone      "exited", or "preempted" when the lease
                                                   had lapsed (the watchdog fenced it) or the
                                                   machine is ending, Flush
    (book)     Ending                    -         from now on an unasked exit is "preempted"

A re-sent Start (reconcile) of an attempt held is a no-op; events about an attempt no longer
held (a "running" that lost the race with its own exit) are dropped. Updates wait in
`book.updates` until the controller acknowledges them (Acked): a newer update under the same
(attempt, status) replaces the older, and an acknowledgement of the older leaves it queued.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from iris.wire import control
from iris.wire.fencing import FENCE_AFTER_S
from iris.worker.outcome import Outcome, OutcomeKind, failure_line

_STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: what a stopped attempt reports once it ran
_SIGKILL_EXIT_CODE = 137  # an outcome without a code (adopted): it was killed


class Phase(enum.Enum):
    WAITING = "waiting"  # for the lease to be renewed before it may start
    STARTING = "starting"  # on the executor: bundle, environment, spawn
    RUNNING = "running"


@dataclass
class Held:
    launch: control.Launch
    phase: Phase
    since: float  # when it entered its phase
    stop_grace_s: float | None = None  # a stop that waits for the process to exist
    stop_wanted: bool = False

    @property
    def task_id(self) -> str:
        return f"{self.launch.job_id}[{self.launch.task_index}]"


UpdateKey = tuple[str, str]  # (attempt id, status)


@dataclass
class Book:
    lease_until: float | None = None  # None: no lease yet, nothing to fence (lease.lapsed)
    held: dict[str, Held] = field(default_factory=dict)
    updates: OrderedDict[UpdateKey, tuple[int, control.AttemptUpdate]] = field(
        default_factory=OrderedDict)
    next_seq: int = 0
    # Why the machine is going away, once its scheduler said so (Slurm's SIGTERM reaches
    # the tasks as well as the worker): their exits are then the machine's end, not theirs.
    ending: str = ""
    # When the lease last lapsed before a renewal came (a partition that healed): an
    # attempt running then was stopped by the watchdog, even if its exit is handled only
    # after the renewal (a loaded host), so its end is the fence's, not its own.
    lapsed_at: float | None = None

    def lease_held(self, now: float) -> bool:
        return self.lease_until is None or now < self.lease_until

    def fenced(self, held: Held | None, now: float) -> bool:
        """True if the attempt `held` was running when the lease lapsed."""
        if not self.lease_held(now):
            return True
        return held is not None and self.lapsed_at is not None and self.lapsed_at >= held.since


# ------------------------------------------------------------ events


@dataclass(frozen=True)
class Start:
    launch: control.Launch


@dataclass(frozen=True)
class Stop:
    attempt_id: str
    grace_s: float | None  # None: the runner's own grace


@dataclass(frozen=True)
class LeaseRenewed:
    until: float  # CLOCK_MONOTONIC


@dataclass(frozen=True)
class PhaseReached:
    attempt_id: str
    status: Literal["building", "running"]
    ports: dict[str, int] | None = None  # with "running": its named ports (ports.py)


@dataclass(frozen=True)
class StartFailed:
    attempt_id: str
    error: str
    exit_code: int = 1


@dataclass(frozen=True)
class Exited:
    attempt_id: str
    outcome: Outcome
    result: bytes | None = None
    stderr_tail: bytes = b""
    usage: control.UsageTotals | None = None  # what it used over its run (usage_sampler.py)


@dataclass(frozen=True)
class Acked:
    sent: tuple[tuple[UpdateKey, int], ...]  # the updates a report carried, with their seq
    acked: frozenset[str]  # attempt ids the controller acknowledged


@dataclass(frozen=True)
class Tick:
    pass


@dataclass(frozen=True)
class Ending:
    reason: str  # "Slurm SIGTERM to job 123"


Event = (Start | Stop | LeaseRenewed | PhaseReached | StartFailed | Exited | Acked | Tick
         | Ending)

# ------------------------------------------------------------ effects


@dataclass(frozen=True)
class BeginStart:
    launch: control.Launch


@dataclass(frozen=True)
class BeginStop:
    attempt_id: str
    task_id: str
    number: int
    grace_s: float | None


@dataclass(frozen=True)
class Flush:
    """Report now: a finished attempt frees capacity the controller is waiting for."""


Effect = BeginStart | BeginStop | Flush


def handle(book: Book, event: Event, now: float) -> tuple[Book, list[Effect]]:
    return book, _HANDLERS[type(event)](book, event, now)


def _start(book: Book, event: Start, now: float) -> list[Effect]:
    attempt_id = event.launch.attempt_id
    if attempt_id in book.held:
        return []
    if not book.lease_held(now):
        book.held[attempt_id] = Held(event.launch, Phase.WAITING, now)
        return []
    book.held[attempt_id] = Held(event.launch, Phase.STARTING, now)
    return [BeginStart(event.launch)]


def _stop(book: Book, event: Stop, now: float) -> list[Effect]:
    held = book.held.get(event.attempt_id)
    if held is None:
        return []
    if held.phase is Phase.WAITING:
        del book.held[event.attempt_id]
        _queue(book, event.attempt_id, "exited", exit_code=_STOPPED_EXIT_CODE,
               error="stopped on request before it started")
        return [Flush()]
    if held.phase is Phase.STARTING:
        held.stop_wanted, held.stop_grace_s = True, event.grace_s
        return []
    return [_begin_stop(event.attempt_id, held, event.grace_s)]


def _lease_renewed(book: Book, event: LeaseRenewed, now: float) -> list[Effect]:
    if book.lease_until is not None and now >= book.lease_until:
        book.lapsed_at = book.lease_until
    book.lease_until = event.until
    effects: list[Effect] = []
    if book.lease_held(now):
        for held in book.held.values():
            if held.phase is Phase.WAITING:
                held.phase, held.since = Phase.STARTING, now
                effects.append(BeginStart(held.launch))
    return effects


def _phase(book: Book, event: PhaseReached, now: float) -> list[Effect]:
    held = book.held.get(event.attempt_id)
    if held is None:
        return []
    _queue(book, event.attempt_id, event.status,
           **({"ports": event.ports} if event.ports else {}))
    if event.status == "running" and held.phase is not Phase.RUNNING:
        held.phase, held.since = Phase.RUNNING, now
        if held.stop_wanted:
            return [_begin_stop(event.attempt_id, held, held.stop_grace_s)]
    return []


def _start_failed(book: Book, event: StartFailed, now: float) -> list[Effect]:
    if book.held.pop(event.attempt_id, None) is None:
        return []
    _queue(book, event.attempt_id, "exited", exit_code=event.exit_code, error=event.error)
    return [Flush()]


def _exited(book: Book, event: Exited, now: float) -> list[Effect]:
    held = book.held.pop(event.attempt_id, None)  # an adopted attempt may end unheld
    outcome = event.outcome
    if outcome.kind is OutcomeKind.SUCCEEDED:
        _queue(book, event.attempt_id, "exited", exit_code=0, result=event.result,
               usage=event.usage)
    elif book.fenced(held, now):  # the watchdog fenced it
        _queue(book, event.attempt_id, "preempted", usage=event.usage, error=(
            f"stopped by fencing: no acknowledged report for {FENCE_AFTER_S:.0f} s "
            "(this worker was cut off from the controller)"))
    elif book.ending:  # killed with its machine: spends the preemption budget, not failures
        _queue(book, event.attempt_id, "preempted",
               error=f"its machine is going away: {book.ending}")
    else:
        code = outcome.exit_code if outcome.exit_code is not None else _SIGKILL_EXIT_CODE
        error = failure_line(outcome)
        if event.stderr_tail:
            error += "\n" + event.stderr_tail.decode("utf-8", "replace").rstrip()
        _queue(book, event.attempt_id, "exited", exit_code=code or 1, error=error,
               result=event.result, usage=event.usage)
    return [Flush()]


def _ending(book: Book, event: Ending, now: float) -> list[Effect]:
    book.ending = book.ending or event.reason
    return []


def _acked(book: Book, event: Acked, now: float) -> list[Effect]:
    for key, seq in event.sent:
        queued = book.updates.get(key)
        if key[0] in event.acked and queued is not None and queued[0] == seq:
            del book.updates[key]
    return []


def _tick(book: Book, event: Tick, now: float) -> list[Effect]:
    expired = [attempt_id for attempt_id, held in book.held.items()
               if held.phase is Phase.WAITING and now - held.since >= FENCE_AFTER_S]
    for attempt_id in expired:  # cut off since: started now, it would only be fenced
        del book.held[attempt_id]
        _queue(book, attempt_id, "preempted", error="not started: this worker's lease "
               "lapsed (no acknowledged report) before it could start")
    return [Flush()] if expired else []


def _begin_stop(attempt_id: str, held: Held, grace_s: float | None) -> BeginStop:
    return BeginStop(attempt_id, held.task_id, held.launch.attempt_number, grace_s)


def _queue(book: Book, attempt_id: str, status: str, **fields: object) -> None:
    book.next_seq += 1
    book.updates[(attempt_id, status)] = (
        book.next_seq, control.AttemptUpdate(attempt_id, status, **fields))  # type: ignore[arg-type]


_HANDLERS: dict[type, Callable[[Book, object, float], list[Effect]]] = {
    Start: _start, Stop: _stop, LeaseRenewed: _lease_renewed, PhaseReached: _phase,
    StartFailed: _start_failed, Exited: _exited, Acked: _acked, Tick: _tick, Ending: _ending,
}
