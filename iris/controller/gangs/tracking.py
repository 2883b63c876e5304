"""The controller's gangs object: each gang placed whole in one region by two-phase
reservation, one record per placement round from the scheduler's ask to the release of its
hosts. Pure: no sockets, no clock reads (`now` is passed).

A round (`GangRound`, named on the wire `gang@seq`: a gang requeued whole is placed again
while its previous round's release may still be travelling) asks every candidate region to
reserve at once; when all have answered (or the gather timeout fires) it commits the best
offer and aborts the others, resending the commit until answered. An attempt with no offer,
or whose commit is refused, backs off and tries again; after `max_attempts` the gang cools
(`waiting`) with the regions' reasons. The hosts the pass set aside stay held until the round
settles. Requests go out as `SendRegion` effects (`take_sends`); replies come back as events
(`replied`, `region_down`), timers fire on the owner's tick (`fire_due`), and rounds placed
are settled in the owner's turn (`settle`): one whose gang no longer waits or whose hosts
filled meanwhile (the regions' view lags by a message) is released instead.

Nothing leaks: every hold has a lease, is aborted as soon as it is not wanted and lapses if
the abort is lost; a gang is placed only by one region's commit of all its hosts. Nothing is
persisted: after a restart the holds lapse and the gangs, still pending, are asked again.
Not the ledgers (ledger.py), the carrying (regions/region.py) or the inventories
(region_pushes.py).
"""

from __future__ import annotations

import enum
import heapq
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from iris.base.ids import new_id
from iris.base.resources import Resources
from iris.controller.gangs import protocol as wire
from iris.controller.gangs.protocol import RegionRequest, SendRegion
from iris.controller.jobs import events as ev
from iris.controller.jobs.state import KernelState
from iris.controller.scheduler_view import chosen_accelerator, gang_misfit, parse_task_id, runs_on
from iris.controller.scheduling.gang_placement import GangRequest
from iris.controller.scheduling.model import GangShape
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.workers import WorkerInfo

_log = logging.getLogger(__name__)


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
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0  # retries after 0.5 s, 1 s, 2 s ... capped at 30 s
    # After this many failed attempts the round is given up with the regions' reasons ...
    max_attempts: int = 8
    # ... and the scheduler waits this long before asking for the gang again, so a gang the
    # regions keep refusing costs a few calls a minute, not one per scheduling pass.
    retry_after_s: float = 5.0


class Phase(enum.Enum):
    GATHERING = "gathering"
    COMMITTING = "committing"
    PLACED = "placed"
    BACKOFF = "backoff"
    RELEASING = "releasing"
    GIVEN_UP = "given up"  # every attempt failed; the record is gone
    RELEASED = "released"  # the regions hold nothing for it; the record is gone


@dataclass(eq=False)
class GangRound:
    key: str  # how the regions name it; the controller never parses it back
    gang_id: str
    job_id: str
    indices: tuple[int, ...]
    set_aside: tuple[str, ...]  # hosts held until the round settles
    shape: GangShape
    regions: tuple[str, ...]  # candidates, best first (the scheduler's ranking)
    phase: Phase = Phase.GATHERING
    attempt: int = 0
    failures: int = 0
    resends: int = 0
    timer_seq: int = 0  # only the latest timer armed acts; older ones are stale
    retry_at: float | None = None
    waiting: set[str] = field(default_factory=set)
    offers: dict[str, wire.Reserved] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    chosen: wire.Reserved | None = None
    hosts: tuple[str, ...] = ()  # once placed
    assigned: bool = False  # settled: its tasks were assigned to `hosts`


class GangTracker:
    """The gangs object (see the module docstring)."""

    def __init__(self, config: CoordinatorConfig | None = None):
        self.config = config or CoordinatorConfig()
        self.rounds: dict[str, GangRound] = {}  # key -> every round the regions may hold
        self.reserving: dict[str, GangRound] = {}  # gang id -> its round not settled yet
        self.cooling: dict[str, tuple[float, dict]] = {}  # gang id -> (until, pending reason)
        self._seq = 0
        self._asks: list[GangRound | str] = []  # rounds to start, keys to release: next take
        self._frames: dict[str, list[RegionRequest]] = {}  # region -> not taken yet
        self._timers: list[tuple[float, int, str, int]] = []  # (at, n, key, timer_seq)
        self._timer_n = 0
        self._outcomes: list[GangRound] = []  # placed, given up or released; not taken yet

    # ---- asking -----------------------------------------------------------------------

    def request(self, req: GangRequest) -> GangRound:
        self._seq += 1
        old = self.reserving.get(req.gang_id)
        if old is not None:  # asked again: the old round is nobody's now
            self.release(old.key)
        rnd = GangRound(f"{req.gang_id}@{self._seq}", req.gang_id, req.job_id,
                        tuple(parse_task_id(t)[1] for t in req.task_ids), req.hosts,
                        req.shape, tuple(req.regions))
        self.reserving[req.gang_id] = rnd
        self._asks.append(rnd)
        return rnd

    def release(self, key: str) -> None:
        """Give back whatever the round holds in its region, in any phase."""
        self._asks.append(key)

    def asked(self) -> bool:
        """A round was asked for since the last take (its regions' inventories go first)."""
        return any(isinstance(a, GangRound) for a in self._asks)

    def held_hosts(self) -> set[str]:
        return {h for r in self.reserving.values() for h in r.set_aside}

    @property
    def placed(self) -> list[GangRound]:
        return [r for r in self.rounds.values() if r.assigned]

    def cooling_reasons(self, now: float) -> dict[str, dict]:
        """gang id -> why every region refused it, for the gangs not to be asked for again
        yet (their cooling has not ended); the ended coolings are forgotten here."""
        ended = [gang for gang, (until, _) in self.cooling.items() if now >= until]
        for gang in ended:
            del self.cooling[gang]
        return {gang: reason for gang, (_, reason) in self.cooling.items()}

    def cooled(self, now: float) -> bool:
        """Some refused gang may be asked for again: the next pass must run (nothing else
        changes when a cooling ends, and passes run only after a change)."""
        return any(now >= until for until, _ in self.cooling.values())

    # ---- settling, in the owner's turn -------------------------------------------------

    def take_outcomes(self) -> list[GangRound]:
        """Rounds placed, given up or released since the last take, each as it is now (its
        `phase`: one placed and released since is seen RELEASED, twice)."""
        out, self._outcomes = self._outcomes, []
        return out

    def settle(self, state: KernelState, workers: Mapping[str, WorkerInfo],
               stopping: dict[str, dict[str, Resources]], now: float
               ) -> tuple[list[ev.Assign], dict[str, dict]] | None:
        """An Assign per round placed whose hosts still fit (each task on the accelerator
        its host has), and job -> why it waits for a round that no longer fit; rounds given
        up cool (`waiting`). None when there was nothing to settle."""
        events, reasons, settled = [], {}, False
        for rnd in self.take_outcomes():
            if self.reserving.get(rnd.gang_id) is not rnd:
                continue  # released meanwhile (ended, or asked again)
            if rnd.phase is Phase.GIVEN_UP:
                settled = True
                del self.reserving[rnd.gang_id]
                said = "; ".join(f"{r}: {why}" for r, why in sorted(rnd.reasons.items()))
                self.cooling[rnd.gang_id] = (now + self.config.retry_after_s, {
                    "code": ReasonCode.NO_CAPACITY.value,
                    "message": f"gang {rnd.gang_id} was refused by every candidate region "
                               f"({said})",
                    "details": {"gang": rnd.gang_id, "regions": dict(rnd.reasons)}})
            elif rnd.phase is Phase.PLACED:
                settled = True
                assign, why = self._assign(rnd, state, workers, stopping)
                events += [assign] if assign else []
                reasons.update({rnd.job_id: why} if why else {})
        return (events, reasons) if settled else None

    def _assign(self, rnd: GangRound, state: KernelState, workers: Mapping[str, WorkerInfo],
                stopping: dict[str, dict[str, Resources]]) -> tuple[ev.Assign | None, dict | None]:
        del self.reserving[rnd.gang_id]
        problem = gang_misfit(rnd.job_id, rnd.indices, rnd.hosts, state, workers, stopping)
        if problem is not None:
            self.release(rnd.key)
            region = rnd.chosen.region if rnd.chosen else ""
            return None, {"code": ReasonCode.WAITING_FOR_GANG.value,
                          "message": f"gang {rnd.gang_id}: region {region} offered hosts "
                                     f"that no longer fit ({problem}); asking again",
                          "details": {"gang": rnd.gang_id, "region": region}}
        rnd.assigned = True
        spec = state.jobs[rnd.job_id].spec
        return ev.Assign(new_id("ev-"), tuple(
            ev.Placement(rnd.job_id, i, h, new_id("att-"),
                         accelerator=chosen_accelerator(spec, workers.get(h)))
            for i, h in zip(sorted(rnd.indices), rnd.hosts, strict=True))), None

    def release_ended(self, state: KernelState) -> None:
        """Release every placed round none of whose tasks still runs on the round's hosts,
        and forget rounds in flight whose gang is no longer waiting (killed meanwhile)."""
        for rnd in self.placed:
            if not any(runs_on(state, rnd.job_id, i, rnd.hosts) for i in rnd.indices):
                rnd.assigned = False
                self.release(rnd.key)
        for gang_id, rnd in list(self.reserving.items()):
            if not all((rnd.job_id, i) in state.pending for i in rnd.indices):
                del self.reserving[gang_id]
                self.release(rnd.key)

    # ---- the regions' side: requests out, replies and timers in -----------------------

    def take_sends(self, now: float, flush: bool = True) -> list[SendRegion]:
        """Start the rounds asked and release those let go since the last take; with
        `flush`, what was asked of each region since the last flush, one SendRegion each
        (the owner flushes at the end of its queue and on its tick, so under load the
        requests of many turns go out together: one `handle_many` per region)."""
        asks, self._asks = self._asks, []
        for ask in asks:
            if isinstance(ask, GangRound):
                self._start(ask, now)
            else:
                self._release(ask, now)
        if not flush:
            return []
        frames, self._frames = self._frames, {}
        return [SendRegion(region, tuple(msgs)) for region, msgs in frames.items()]

    def replied(self, region: str, replies: Iterable[wire.RegionReply | None], now: float) -> None:
        """A region's typed replies to one SendRegion, in order (None where none is due)."""
        for reply in replies:
            if reply is not None:
                _REPLIES[type(reply)](self, reply, now)

    def region_down(self, region: str, why: object, now: float) -> None:
        """A SendRegion was not delivered or not answered: gathers waiting on that region
        stop waiting; commits and releases keep resending (only that region can say what it
        holds), and the regions' leases free any hold whose abort was lost."""
        _log.warning("gang requests to region %s failed: %s", region, why)
        for rnd in list(self.rounds.values()):
            if rnd.phase is Phase.GATHERING and region in rnd.waiting:
                rnd.waiting.discard(region)
                rnd.reasons[region] = "region down"
                if not rnd.waiting:
                    self._decide(rnd, now)

    def fire_due(self, now: float) -> None:
        """Fire the timers due by `now` (the owner's tick: delays are 0.5 s and up)."""
        while self._timers and self._timers[0][0] <= now:
            _, _, key, seq = heapq.heappop(self._timers)
            rnd = self.rounds.get(key)
            if rnd is not None and seq == rnd.timer_seq:
                self._on_timer(rnd, now)

    def next_timer(self) -> float | None:
        """When the next live timer is due (None: none armed)."""
        return min((at for at, _, key, seq in self._timers
                    if key in self.rounds and self.rounds[key].timer_seq == seq), default=None)

    def _on_timer(self, rnd: GangRound, now: float) -> None:
        if rnd.phase is Phase.GATHERING:
            for region in sorted(rnd.waiting):
                rnd.reasons[region] = "no answer before the gather timeout"
                self._send(region, wire.AbortRequest(rnd.key, rnd.attempt))
            rnd.waiting.clear()
            self._decide(rnd, now)
        elif rnd.phase is Phase.BACKOFF:
            self._attempt(rnd, now)
        elif rnd.phase in (Phase.COMMITTING, Phase.RELEASING):
            rnd.resends += 1
            self._send_chosen(rnd, now)

    def _gathering(self, msg: wire.Reserved | wire.Refused) -> GangRound | None:
        """The round whose current gather waits for this answer, if any."""
        rnd = self.rounds.get(msg.gang_id)
        ok = (rnd is not None and rnd.phase is Phase.GATHERING and rnd.attempt == msg.attempt
              and msg.region in rnd.waiting)
        if ok:
            rnd.waiting.discard(msg.region)
        return rnd if ok else None

    def _on_reserved(self, msg: wire.Reserved, now: float) -> None:
        rnd = self.rounds.get(msg.gang_id)
        if rnd is not None and rnd.chosen is not None and rnd.chosen.token == msg.token:
            return  # a duplicate of the offer being committed
        if self._gathering(msg) is None:
            # Late, duplicate or unwanted: let go of it now rather than at lease end.
            if rnd is None or rnd.offers.get(msg.region) != msg:
                self._send(msg.region, wire.AbortRequest(msg.gang_id, msg.attempt))
            return
        rnd.offers[msg.region] = msg
        if not rnd.waiting:
            self._decide(rnd, now)

    def _on_refused(self, msg: wire.Refused, now: float) -> None:
        rnd = self._gathering(msg)
        if rnd is not None:
            rnd.reasons[msg.region] = f"{msg.code}: {msg.reason}"
            if not rnd.waiting:
                self._decide(rnd, now)

    def _on_committed(self, msg: wire.Committed, now: float) -> None:
        rnd = self.rounds.get(msg.gang_id)
        if rnd is None or rnd.chosen is None or rnd.chosen.token != msg.token:
            # A commit nobody wants (defensive: cannot arise from our own sends): free it.
            self._send(msg.region, wire.ReleaseRequest(msg.gang_id, msg.token))
            return
        if rnd.phase is Phase.COMMITTING:
            rnd.phase, rnd.hosts = Phase.PLACED, tuple(msg.hosts)
            rnd.reasons.clear()
            rnd.timer_seq += 1  # cancels the resend timer
            self._outcomes.append(rnd)

    def _on_commit_refused(self, msg: wire.CommitRefused, now: float) -> None:
        rnd = self.rounds.get(msg.gang_id)
        if (rnd is None or rnd.phase is not Phase.COMMITTING or rnd.chosen is None
                or rnd.chosen.token != msg.token):
            return
        rnd.reasons[msg.region] = f"commit refused, {msg.code}: {msg.reason}"
        rnd.chosen = None
        self._fail(rnd, now)

    def _on_released(self, msg: wire.Released, now: float) -> None:
        rnd = self.rounds.get(msg.gang_id)
        if (rnd is not None and rnd.phase is Phase.RELEASING and rnd.chosen is not None
                and rnd.chosen.token == msg.token):
            self._forget(rnd)

    # ---- steps --------------------------------------------------------------------------

    def _start(self, rnd: GangRound, now: float) -> None:
        if not rnd.regions:
            rnd.phase, rnd.reasons = Phase.GIVEN_UP, {"*": "no candidate region"}
            self._outcomes.append(rnd)
            return
        self.rounds[rnd.key] = rnd
        self._attempt(rnd, now)

    def _release(self, key: str, now: float) -> None:
        rnd = self.rounds.get(key)
        if rnd is None:
            return
        rnd.assigned = False
        if self.reserving.get(rnd.gang_id) is rnd:
            del self.reserving[rnd.gang_id]
        if rnd.phase is Phase.GATHERING:
            for region in rnd.regions:
                self._send(region, wire.AbortRequest(rnd.key, rnd.attempt))
        if rnd.phase in (Phase.GATHERING, Phase.BACKOFF):
            self._forget(rnd)
            return
        if rnd.phase is not Phase.RELEASING:
            rnd.phase, rnd.resends = Phase.RELEASING, 0
        self._send_chosen(rnd, now)

    def _attempt(self, rnd: GangRound, now: float) -> None:
        rnd.attempt += 1
        rnd.phase, rnd.waiting, rnd.offers = Phase.GATHERING, set(rnd.regions), {}
        rnd.chosen = rnd.retry_at = None
        for region in rnd.regions:
            self._send(region, wire.ReserveRequest(rnd.key, rnd.attempt, rnd.shape,
                                              self.config.lease_s))
        self._arm(rnd, now + self.config.gather_timeout_s)

    def _decide(self, rnd: GangRound, now: float) -> None:
        best = next((rnd.offers[r] for r in rnd.regions if r in rnd.offers), None)
        for region in rnd.regions:
            if region in rnd.offers and rnd.offers[region] is not best:
                self._send(region, wire.AbortRequest(rnd.key, rnd.attempt))
        if best is None:
            self._fail(rnd, now)
            return
        rnd.phase, rnd.chosen, rnd.resends = Phase.COMMITTING, best, 0
        self._send_chosen(rnd, now)

    def _send_chosen(self, rnd: GangRound, now: float) -> None:
        c = rnd.chosen
        assert c is not None
        if rnd.phase is Phase.COMMITTING:
            self._send(c.region, wire.CommitRequest(rnd.key, c.attempt, c.token))
        else:
            self._send(c.region, wire.ReleaseRequest(rnd.key, c.token))
        self._arm(rnd, now + min(self.config.resend_s * 2 ** rnd.resends,
                                 self.config.backoff_max_s))

    def _fail(self, rnd: GangRound, now: float) -> None:
        rnd.failures += 1
        if rnd.failures >= self.config.max_attempts:
            rnd.phase = Phase.GIVEN_UP
            del self.rounds[rnd.key]
            self._outcomes.append(rnd)
            return
        rnd.phase = Phase.BACKOFF
        delay = self.config.backoff_initial_s * 2 ** (rnd.failures - 1)
        rnd.retry_at = now + min(delay, self.config.backoff_max_s)
        self._arm(rnd, rnd.retry_at)

    def _forget(self, rnd: GangRound) -> None:
        """The regions hold nothing for the round any more."""
        del self.rounds[rnd.key]
        rnd.phase = Phase.RELEASED
        self._outcomes.append(rnd)

    def _send(self, region: str, request: RegionRequest) -> None:
        self._frames.setdefault(region, []).append(request)

    def _arm(self, rnd: GangRound, at: float) -> None:
        rnd.timer_seq += 1
        self._timer_n += 1
        heapq.heappush(self._timers, (at, self._timer_n, rnd.key, rnd.timer_seq))


_REPLIES = {
    wire.Reserved: GangTracker._on_reserved,
    wire.Refused: GangTracker._on_refused,
    wire.Committed: GangTracker._on_committed,
    wire.CommitRefused: GangTracker._on_commit_refused,
    wire.Released: GangTracker._on_released,
}
