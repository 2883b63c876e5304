"""The gang coordinator: a pure state machine that places each gang whole in one region.

`handle(event, now) -> effects`. Events are requests from the controller (PlaceGang,
ReleaseGang), replies from regions (protocol.py), fired timers, and RegionDown (a call to
the region failed). Effects are messages to send, timers to arm, and outcomes to record.
No sockets, no clock: the gangs object (tracking.GangTracker), on the controller's turn,
passes `now` and applies the effects.

One attempt: ask every candidate region to reserve at once; when all have answered (or
the gather timeout fires) commit the best offer and abort every other one; resend the
commit until the region answers. An attempt that gets no offer, or whose commit is
refused (lease expired, region restarted), backs off exponentially and tries again,
keeping the regions' reasons so "why pending" can show them.

Why nothing leaks: every hold is an uncommitted reservation with a lease, aborted by
key as soon as it is not wanted and ended by the region when its lease runs out if the
abort is lost. A gang is placed only by one region's commit, which moves all its hosts at
once. The coordinator's state is not persisted: a restarted controller starts with no
rounds, every hold it had lapses with its lease (10 s), and its gangs, still pending in the
job store, are asked for again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from iris.controller.gangs.protocol import (
    AbortRequest,
    CommitRefused,
    CommitRequest,
    Committed,
    Refused,
    RegionRequest,
    Released,
    ReleaseRequest,
    Reserved,
    ReserveRequest,
)
from iris.controller.scheduling.model import GangShape
from iris.controller.scheduling.reasons import PendingReason, ReasonCode


@dataclass(frozen=True)
class CoordinatorConfig:
    # A hold must outlive the gather timeout plus a few commit round trips on a loaded
    # controller; 10 s leaves > 3x margin over gather (2 s) + 2 commit resends (2 s).
    lease_s: float = 10.0
    # Offers from slow regions are not waited for longer than this (seconds); a region that
    # misses it is aborted and counted as a refusal for this attempt.
    gather_timeout_s: float = 2.0
    # Resend commit / release if unanswered after this (seconds), doubling up to backoff_max_s.
    resend_s: float = 1.0
    # Retry after a failed attempt: 0.5 s, 1 s, 2 s ... capped at 30 s so a gang waiting
    # for capacity is re-tried twice a minute without hammering the regions.
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    # After this many failed attempts the gang goes back to the scheduler with its reasons.
    max_attempts: int = 8


# ---- events -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PlaceGang:
    gang_id: str
    shape: GangShape
    regions: tuple[str, ...]  # candidate regions, best first (the scheduler's ranking)


@dataclass(frozen=True, slots=True)
class ReleaseGang:
    """The gang ended or was cancelled: give back whatever it holds, in any phase."""

    gang_id: str


@dataclass(frozen=True, slots=True)
class Timer:
    gang_id: str
    seq: int  # only the latest timer armed for a gang acts; older ones are stale


@dataclass(frozen=True, slots=True)
class RegionDown:
    """A call to the region failed: gathers waiting on its answer stop waiting."""

    region: str


# ---- effects ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Send:
    region: str
    request: RegionRequest


@dataclass(frozen=True, slots=True)
class SetTimer:
    at: float
    timer: Timer


@dataclass(frozen=True, slots=True)
class Placed:
    gang_id: str
    region: str
    token: str
    hosts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Unplaceable:
    gang_id: str
    reasons: dict[str, str]  # region -> why its last answer was no


@dataclass(frozen=True, slots=True)
class GangReleased:
    gang_id: str


Effect = Send | SetTimer | Placed | Unplaceable | GangReleased


class Phase(enum.Enum):
    GATHERING = "gathering"
    COMMITTING = "committing"
    PLACED = "placed"
    BACKOFF = "backoff"
    RELEASING = "releasing"


@dataclass
class GangRecord:
    gang_id: str
    shape: GangShape
    regions: tuple[str, ...]
    phase: Phase = Phase.GATHERING
    attempt: int = 0
    failures: int = 0
    resends: int = 0
    timer_seq: int = 0
    retry_at: float | None = None
    waiting: set[str] = field(default_factory=set)
    offers: dict[str, Reserved] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    chosen: Reserved | None = None


class GangCoordinator:
    """Two-phase gang placement across regions. Mutable state, deterministic transitions."""

    def __init__(self, config: CoordinatorConfig | None = None):
        self.config = config or CoordinatorConfig()
        self._gangs: dict[str, GangRecord] = {}

    def handle(self, event: object, now: float) -> list[Effect]:
        out: list[Effect] = []
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"gang coordinator cannot handle {type(event).__name__}")
        handler(self, event, now, out)
        return out

    def record(self, gang_id: str) -> GangRecord | None:
        return self._gangs.get(gang_id)

    def gangs(self) -> dict[str, GangRecord]:
        return dict(self._gangs)

    def pending_reason(self, gang_id: str) -> PendingReason | None:
        """Why a gang's tasks are not running yet, for `iris job status`."""
        rec = self._gangs.get(gang_id)
        if rec is None or rec.phase is Phase.PLACED:
            return None
        details = {"phase": rec.phase.value, "attempt": rec.attempt,
                   "failed_attempts": rec.failures, "regions": dict(rec.reasons)}
        if rec.phase is Phase.BACKOFF:
            details["retry_at"] = rec.retry_at
            why = "; ".join(f"{r}: {m}" for r, m in sorted(rec.reasons.items()))
            msg = f"no region could reserve the gang ({why}); retrying"
        else:
            msg = f"gang reservation {rec.phase.value} (attempt {rec.attempt})"
        return PendingReason(ReasonCode.WAITING_FOR_GANG, msg, details)

    # ---- controller requests -------------------------------------------------------

    def _on_place(self, ev: PlaceGang, now: float, out: list[Effect]) -> None:
        if ev.gang_id in self._gangs:
            return  # idempotent: the scheduler may ask again while an attempt is running
        if not ev.regions:
            out.append(Unplaceable(ev.gang_id, {"*": "no candidate region"}))
            return
        rec = GangRecord(ev.gang_id, ev.shape, tuple(ev.regions))
        self._gangs[ev.gang_id] = rec
        self._start_attempt(rec, now, out)

    def _on_release(self, ev: ReleaseGang, now: float, out: list[Effect]) -> None:
        rec = self._gangs.get(ev.gang_id)
        if rec is None:
            return
        if rec.phase is Phase.GATHERING:
            self._abort_all(rec, out)
        if rec.phase in (Phase.GATHERING, Phase.BACKOFF):
            del self._gangs[ev.gang_id]
            out.append(GangReleased(ev.gang_id))
            return
        if rec.phase is not Phase.RELEASING:
            rec.phase = Phase.RELEASING
            rec.resends = 0
        self._send_chosen(rec, now, out)

    # ---- region replies --------------------------------------------------------------

    def _on_reserved(self, ev: Reserved, now: float, out: list[Effect]) -> None:
        rec = self._gangs.get(ev.gang_id)
        if rec is not None and rec.chosen is not None and rec.chosen.token == ev.token:
            return  # a duplicate of the offer being committed
        current = (rec is not None and rec.phase is Phase.GATHERING
                   and rec.attempt == ev.attempt and ev.region in rec.waiting)
        if not current:
            # Late, duplicate or unwanted: let go of it now rather than at lease end.
            if rec is None or rec.offers.get(ev.region) != ev:
                out.append(Send(ev.region, AbortRequest(ev.gang_id, ev.attempt)))
            return
        rec.waiting.discard(ev.region)
        rec.offers[ev.region] = ev
        if not rec.waiting:
            self._decide(rec, now, out)

    def _on_refused(self, ev: Refused, now: float, out: list[Effect]) -> None:
        rec = self._gangs.get(ev.gang_id)
        if (rec is None or rec.phase is not Phase.GATHERING or rec.attempt != ev.attempt
                or ev.region not in rec.waiting):
            return
        rec.waiting.discard(ev.region)
        rec.reasons[ev.region] = f"{ev.code}: {ev.reason}"
        if not rec.waiting:
            self._decide(rec, now, out)

    def _on_committed(self, ev: Committed, now: float, out: list[Effect]) -> None:
        rec = self._gangs.get(ev.gang_id)
        ours = rec is not None and rec.chosen is not None and rec.chosen.token == ev.token
        if not ours:
            # A commit nobody wants any more (defensive: cannot arise from this machine's
            # own sends); free it so it cannot leak.
            out.append(Send(ev.region, ReleaseRequest(ev.gang_id, ev.token)))
            return
        if rec.phase is Phase.COMMITTING:
            rec.phase = Phase.PLACED
            rec.reasons.clear()
            rec.timer_seq += 1  # cancels the resend timer
            out.append(Placed(rec.gang_id, ev.region, ev.token, ev.hosts))

    def _on_commit_refused(self, ev: CommitRefused, now: float, out: list[Effect]) -> None:
        rec = self._gangs.get(ev.gang_id)
        if (rec is None or rec.phase is not Phase.COMMITTING or rec.chosen is None
                or rec.chosen.token != ev.token):
            return
        rec.reasons[ev.region] = f"commit refused, {ev.code}: {ev.reason}"
        rec.chosen = None
        self._fail(rec, now, out)

    def _on_released(self, ev: Released, now: float, out: list[Effect]) -> None:
        rec = self._gangs.get(ev.gang_id)
        if (rec is not None and rec.phase is Phase.RELEASING and rec.chosen is not None
                and rec.chosen.token == ev.token):
            del self._gangs[ev.gang_id]
            out.append(GangReleased(ev.gang_id))

    # ---- timers and failures ----------------------------------------------------------

    def _on_timer(self, ev: Timer, now: float, out: list[Effect]) -> None:
        rec = self._gangs.get(ev.gang_id)
        if rec is None or ev.seq != rec.timer_seq:
            return
        if rec.phase is Phase.GATHERING:
            for region in sorted(rec.waiting):
                rec.reasons[region] = "no answer before the gather timeout"
                out.append(Send(region, AbortRequest(rec.gang_id, rec.attempt)))
            rec.waiting.clear()
            self._decide(rec, now, out)
        elif rec.phase is Phase.BACKOFF:
            self._start_attempt(rec, now, out)
        elif rec.phase in (Phase.COMMITTING, Phase.RELEASING):
            rec.resends += 1
            self._send_chosen(rec, now, out)

    def _on_region_down(self, ev: RegionDown, now: float, out: list[Effect]) -> None:
        for rec in list(self._gangs.values()):
            if rec.phase is Phase.GATHERING and ev.region in rec.waiting:
                rec.waiting.discard(ev.region)
                rec.reasons[ev.region] = "region down"
                if not rec.waiting:
                    self._decide(rec, now, out)
            # COMMITTING / RELEASING keep resending: only that region can say what it holds.

    # ---- steps ---------------------------------------------------------------------

    def _start_attempt(self, rec: GangRecord, now: float, out: list[Effect]) -> None:
        rec.attempt += 1
        rec.phase = Phase.GATHERING
        rec.waiting = set(rec.regions)
        rec.offers = {}
        rec.chosen = None
        rec.retry_at = None
        for region in rec.regions:
            out.append(Send(region, ReserveRequest(rec.gang_id, rec.attempt, rec.shape,
                                                   self.config.lease_s)))
        self._arm(rec, now + self.config.gather_timeout_s, out)

    def _decide(self, rec: GangRecord, now: float, out: list[Effect]) -> None:
        best = next((rec.offers[r] for r in rec.regions if r in rec.offers), None)
        for region in rec.regions:
            if region in rec.offers and rec.offers[region] is not best:
                out.append(Send(region, AbortRequest(rec.gang_id, rec.attempt)))
        if best is None:
            self._fail(rec, now, out)
            return
        rec.phase = Phase.COMMITTING
        rec.chosen = best
        rec.resends = 0
        self._send_chosen(rec, now, out)

    def _send_chosen(self, rec: GangRecord, now: float, out: list[Effect]) -> None:
        c = rec.chosen
        assert c is not None
        if rec.phase is Phase.COMMITTING:
            out.append(Send(c.region, CommitRequest(rec.gang_id, c.attempt, c.token)))
        else:
            out.append(Send(c.region, ReleaseRequest(rec.gang_id, c.token)))
        delay = min(self.config.resend_s * 2 ** rec.resends, self.config.backoff_max_s)
        self._arm(rec, now + delay, out)

    def _fail(self, rec: GangRecord, now: float, out: list[Effect]) -> None:
        rec.failures += 1
        if rec.failures >= self.config.max_attempts:
            del self._gangs[rec.gang_id]
            out.append(Unplaceable(rec.gang_id, dict(rec.reasons)))
            return
        rec.phase = Phase.BACKOFF
        delay = self.config.backoff_initial_s * 2 ** (rec.failures - 1)
        rec.retry_at = now + min(delay, self.config.backoff_max_s)
        self._arm(rec, rec.retry_at, out)

    def _abort_all(self, rec: GangRecord, out: list[Effect]) -> None:
        for region in rec.regions:
            out.append(Send(region, AbortRequest(rec.gang_id, rec.attempt)))

    def _arm(self, rec: GangRecord, at: float, out: list[Effect]) -> None:
        rec.timer_seq += 1
        out.append(SetTimer(at, Timer(rec.gang_id, rec.timer_seq)))


_HANDLERS = {
    PlaceGang: GangCoordinator._on_place,
    ReleaseGang: GangCoordinator._on_release,
    Reserved: GangCoordinator._on_reserved,
    Refused: GangCoordinator._on_refused,
    Committed: GangCoordinator._on_committed,
    CommitRefused: GangCoordinator._on_commit_refused,
    Released: GangCoordinator._on_released,
    Timer: GangCoordinator._on_timer,
    RegionDown: GangCoordinator._on_region_down,
}
