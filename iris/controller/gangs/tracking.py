"""The controller's gangs object: rounds being reserved, rounds holding hosts, the two-phase
coordinator that reserves them in the regions, and its timers. Pure: no sockets, no clock reads (`now` is passed).

Not the coordinator's decisions (coordinator.py) nor the ledgers, nor the carrying of requests
(the Controller actor's RegionCarrier, regions/region.py). The scheduler asks for a gang (a GangRequest); the
tracker starts a placement *round* under its own typed id (RoundId), because a gang requeued
whole is placed again while the release of its previous round may still be travelling, and
hands it to the coordinator. The hosts the scheduler set aside stay held until the round
settles, so later passes do not give them to smaller work. What the coordinator sends comes
out as `SendRegion` effects (one per region, the typed requests of a whole queue of turns
together: `take_sends`; frames are made only by the carrier, for a Region in another
process); the regions' typed replies come back as events (`replied`, `region_down`), the
timers fire on the owner's tick (`fire_due`), and the coordinator's outcomes are settled in
the owner's turn (`settle`): for a placement the tracker checks that the gang still waits
and that the hosts still have room (the regions' view lags the controller's by a message)
and hands back the Assign to make; a round that no longer fits, or whose gang has ended, is
released so its region frees the hosts.

Not the regions' inventories either: what each region's ledger should own is pushed by
RegionPushes (region_pushes.py), before any round that relies on it.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from iris.base.ids import new_id
from iris.base.resources import Resources
from iris.controller.gangs.coordinator import (
    CoordinatorConfig,
    GangCoordinator,
    GangReleased,
    Placed,
    PlaceGang,
    RegionDown,
    ReleaseGang,
    Send,
    SetTimer,
    Timer,
    Unplaceable,
)
from iris.controller.gangs.protocol import RegionReply, RegionRequest
from iris.controller.jobs import events as ev
from iris.controller.jobs.model import ACTIVE_ATTEMPT
from iris.controller.jobs.state import KernelState
from iris.controller.scheduler_view import chosen_accelerator, parse_task_id
from iris.controller.scheduling.gang_placement import GangRequest
from iris.controller.scheduling.model import per_host_demand
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.workers import WorkerInfo

_log = logging.getLogger(__name__)
# After every candidate region refused a gang (the coordinator already retried with
# backoff), the scheduler waits this long before asking again, so a gang the regions keep
# refusing costs a few calls a minute, not one per scheduling pass.
RETRY_AFTER_S = 5.0


@dataclass(frozen=True, slots=True)
class SendRegion:
    """Gang requests for one region's ledger, in order, typed: what the actor carries to
    that Region actor (handed over as they are on its turn; as frames to one in another
    process). Its replies come back as `GangTracker.replied`, a failure as `region_down`."""

    region: str
    requests: tuple[RegionRequest, ...]


@dataclass(frozen=True, slots=True)
class RoundId:
    """One placement round of one gang. `key` is how the coordinator and the regions name
    it on the wire; the controller never parses it back (it looks the round up)."""

    job_id: str
    gang_id: str
    seq: int

    @property
    def key(self) -> str:
        return f"{self.gang_id}@{self.seq}"


@dataclass
class Round:
    round_id: RoundId
    gang_id: str
    job_id: str
    indices: tuple[int, ...]
    set_aside: tuple[str, ...]
    region: str = ""
    hosts: tuple[str, ...] = ()


class GangTracker:
    """The gangs object (see the module docstring)."""

    def __init__(self, retry_after_s: float = RETRY_AFTER_S,
                 config: CoordinatorConfig | None = None):
        self.retry_after_s = retry_after_s
        self.reserving: dict[str, Round] = {}  # gang id -> its round in flight
        self.placed: dict[RoundId, Round] = {}  # rounds whose gang holds hosts
        self.cooling: dict[str, tuple[float, dict]] = {}  # gang id -> (until, pending reason)
        self._seq = 0
        self._by_key: dict[str, Round] = {}  # wire key -> round in `reserving`
        self._coordinator = GangCoordinator(config or CoordinatorConfig())
        self._asks: list[PlaceGang | ReleaseGang] = []  # for the coordinator, at the next take
        self._frames: dict[str, list[RegionRequest]] = {}  # region -> not taken yet
        self._timers: list[tuple[float, int, Timer]] = []
        self._timer_seq = 0
        self._outcomes: list[Placed | Unplaceable | GangReleased] = []

    # ---- asking -----------------------------------------------------------------------

    def request(self, req: GangRequest) -> None:
        self._seq += 1
        round_id = RoundId(req.job_id, req.gang_id, self._seq)
        indices = tuple(parse_task_id(t)[1] for t in req.task_ids)
        old = self.reserving.get(req.gang_id)
        if old is not None:
            self._by_key.pop(old.round_id.key, None)
        rnd = self.reserving[req.gang_id] = Round(round_id, req.gang_id, req.job_id, indices,
                                                  req.hosts)
        self._by_key[round_id.key] = rnd
        self._asks.append(PlaceGang(round_id.key, req.shape, req.regions))

    def asked(self) -> bool:
        """A round was asked for since the last take (its regions' inventories go first)."""
        return any(isinstance(a, PlaceGang) for a in self._asks)

    def held_hosts(self) -> set[str]:
        return {h for r in self.reserving.values() for h in r.set_aside}

    def waiting(self, gang_id: str, now: float) -> dict | None:
        """Why a gang the regions refused is not asked for again yet (None: ask)."""
        entry = self.cooling.get(gang_id)
        if entry is None:
            return None
        if now >= entry[0]:
            del self.cooling[gang_id]
            return None
        return entry[1]

    def cooled(self, now: float) -> bool:
        """Some refused gang may be asked for again: the next pass must run (nothing else
        changes when a cooling ends, and passes run only after a change)."""
        return any(now >= until for until, _ in self.cooling.values())

    # ---- outcomes -----------------------------------------------------------------------

    def round_of(self, key: str) -> RoundId | None:
        """The round a coordinator outcome names (by its wire key), if still in flight."""
        rnd = self._by_key.get(key)
        return rnd.round_id if rnd is not None else None

    def sort_outcomes(self, outcomes: Iterable[object]
                      ) -> tuple[list[tuple[RoundId, str, tuple[str, ...]]],
                                 list[tuple[RoundId, dict[str, str]]]]:
        """The coordinator's outcomes (Placed, Unplaceable) by round: (placed: round,
        region, hosts; refused: round, region -> why). A gang placed for a round nobody
        waits for any more (it ended, or was asked again) gets its hosts back now: a
        ReleaseGang to the coordinator."""
        placed, refused = [], []
        for outcome in outcomes:
            round_id = self.round_of(outcome.gang_id)
            if round_id is None:
                if isinstance(outcome, Placed):
                    self._asks.append(ReleaseGang(outcome.gang_id))
            elif isinstance(outcome, Placed):
                placed.append((round_id, outcome.region, tuple(outcome.hosts)))
            elif isinstance(outcome, Unplaceable):
                refused.append((round_id, dict(outcome.reasons)))
        return placed, refused

    def placed_round(self, round_id: RoundId, region: str, hosts: Iterable[str],
                     state: KernelState, workers: Mapping[str, WorkerInfo],
                     stopping: dict[str, dict[str, Resources]],
                     new_attempt_id: Callable[[], str]) -> tuple[list[ev.Placement], dict | None]:
        """The placements to assign for a reserved round, or none and why (then released)."""
        hosts = tuple(hosts)
        rnd = self._take_reserving(round_id)
        if rnd is None:  # the gang ended or was re-asked meanwhile: give the hosts back
            self.release(round_id)
            return [], None
        problem = _misfit(rnd, hosts, state, workers, stopping)
        if problem is not None:
            self.release(round_id)
            return [], {"code": ReasonCode.WAITING_FOR_GANG.value,
                        "message": f"gang {rnd.gang_id}: region {region} offered hosts that "
                                   f"no longer fit ({problem}); asking again",
                        "details": {"gang": rnd.gang_id, "region": region}}
        rnd.region, rnd.hosts = region, hosts
        self.placed[round_id] = rnd
        return [ev.Placement(rnd.job_id, i, h, new_attempt_id())
                for i, h in zip(sorted(rnd.indices), hosts, strict=True)], None

    def unplaceable(self, round_id: RoundId, reasons: Mapping[str, str], now: float) -> str | None:
        """Every candidate region refused; returns the job to show the regions' reasons on."""
        rnd = self._take_reserving(round_id)
        if rnd is None:
            return None
        said = "; ".join(f"{region}: {why}" for region, why in sorted(reasons.items()))
        self.cooling[rnd.gang_id] = (now + self.retry_after_s, {
            "code": ReasonCode.NO_CAPACITY.value,
            "message": f"gang {rnd.gang_id} was refused by every candidate region ({said})",
            "details": {"gang": rnd.gang_id, "regions": dict(reasons)}})
        return rnd.job_id

    def settle(self, state: KernelState, workers: Mapping[str, WorkerInfo],
               stopping: dict[str, dict[str, Resources]], now: float
               ) -> tuple[list[ev.Assign], dict[str, dict]] | None:
        """The coordinator's outcomes so far, settled in the owner's turn: an Assign per
        round placed whose hosts still fit (each task on the accelerator its host has),
        and job -> why it waits for a round that no longer fit; rounds every region
        refused cool (`waiting`). None when there was nothing to settle."""
        outcomes = self.take_outcomes()
        placed, refused = self.sort_outcomes(outcomes) if outcomes else ([], [])
        if not placed and not refused:
            return None
        events, reasons = [], {}
        for round_id, region, hosts in placed:
            placements, problem = self.placed_round(round_id, region, hosts, state, workers,
                                                    stopping, lambda: new_id("att-"))
            if problem is not None:
                reasons[round_id.job_id] = problem
            if placements:
                spec = state.jobs[round_id.job_id].spec
                events.append(ev.Assign(new_id("ev-"), tuple(
                    dataclasses.replace(p, accelerator=chosen_accelerator(
                        spec, workers.get(p.worker_id))) for p in placements)))
        for round_id, why in refused:
            self.unplaceable(round_id, why, now)
        return events, reasons

    def release(self, round_id: RoundId) -> None:
        """Give back whatever the round holds in its region, in any phase."""
        self._asks.append(ReleaseGang(round_id.key))

    def _take_reserving(self, round_id: RoundId) -> Round | None:
        rnd = self.reserving.get(round_id.gang_id)
        if rnd is None or rnd.round_id != round_id:
            return None
        self._by_key.pop(round_id.key, None)
        return self.reserving.pop(round_id.gang_id)

    # ---- upkeep -----------------------------------------------------------------------

    def release_ended(self, state: KernelState) -> None:
        """Release every placed round none of whose tasks still runs on the round's hosts,
        and forget rounds in flight whose gang is no longer waiting (killed meanwhile)."""
        for round_id, rnd in list(self.placed.items()):
            if not any(_runs_on(state, rnd.job_id, i, rnd.hosts) for i in rnd.indices):
                del self.placed[round_id]
                self.release(round_id)
        for gang_id, rnd in list(self.reserving.items()):
            if not all((rnd.job_id, i) in state.pending for i in rnd.indices):
                del self.reserving[gang_id]
                self._by_key.pop(rnd.round_id.key, None)
                self.release(rnd.round_id)

    # ---- the coordinator's side: frames out, replies and timers in ----------------------

    def take_sends(self, now: float, flush: bool = True) -> list[SendRegion]:
        """Hand the rounds asked and released since the last take to the coordinator; with
        `flush`, what it asked of each region since the last flush, one SendRegion each (the
        owner flushes at the end of its queue and on its tick, so under load the frames of
        many turns go out together: one `handle_many` per region)."""
        asks, self._asks = self._asks, []
        self._handle(asks, now)
        if not flush:
            return []
        frames, self._frames = self._frames, {}
        return [SendRegion(region, tuple(msgs)) for region, msgs in frames.items()]

    def replied(self, region: str, replies: Iterable[RegionReply | None], now: float) -> None:
        """A region's replies to one SendRegion, in order (None where a request needs none),
        typed (the carrier decoded those that crossed processes)."""
        self._handle([r for r in replies if r is not None], now)

    def region_down(self, region: str, why: object, now: float) -> None:
        """A SendRegion was not delivered or not answered: gathers waiting on that region
        stop waiting; the coordinator's resends cover commits and releases, and the
        regions' leases free any hold whose abort was lost."""
        _log.warning("gang requests to region %s failed: %s", region, why)
        self._handle([RegionDown(region)], now)

    def fire_due(self, now: float) -> None:
        """Fire the coordinator timers due by `now` (the owner's tick: its delays are 0.5 s
        and up, so a 50 ms tick is fine-grained enough)."""
        due = []
        while self._timers and self._timers[0][0] <= now:
            due.append(heapq.heappop(self._timers)[2])
        self._handle(due, now)

    def take_outcomes(self) -> list[Placed | Unplaceable | GangReleased]:
        """The coordinator's outcomes since the last take (for `sort_outcomes`)."""
        out, self._outcomes = self._outcomes, []
        return out

    def _handle(self, events: Iterable[object], now: float) -> None:
        for event in events:
            for effect in self._coordinator.handle(event, now):
                if isinstance(effect, Send):
                    self._frames.setdefault(effect.region, []).append(effect.request)
                elif isinstance(effect, SetTimer):
                    self._timer_seq += 1
                    heapq.heappush(self._timers, (effect.at, self._timer_seq, effect.timer))
                else:  # Placed, Unplaceable, GangReleased
                    self._outcomes.append(effect)


def _runs_on(state: KernelState, job_id: str, index: int, hosts: tuple[str, ...]) -> bool:
    task = state.tasks.get((job_id, index))
    attempt = state.attempts.get(task.attempt_id or "") if task else None
    return attempt is not None and attempt.state in ACTIVE_ATTEMPT and attempt.worker_id in hosts


def _misfit(rnd: Round, hosts: tuple[str, ...], state: KernelState,
            workers: Mapping[str, WorkerInfo],
            stopping: dict[str, dict[str, Resources]]) -> str | None:
    if len(hosts) != len(rnd.indices):
        return f"{len(hosts)} hosts for {len(rnd.indices)} tasks"
    if not all((rnd.job_id, i) in state.pending for i in rnd.indices):
        return "its tasks are no longer all pending"
    need = per_host_demand(state.jobs[rnd.job_id].spec.resources)
    for h in hosts:
        worker = workers.get(h)
        if worker is None:
            return f"host {h} is not registered"
        used = [state.jobs[state.attempts[a].job_id].spec.resources
                for a in state.by_worker.get(h, ())] + list(stopping.get(h, {}).values())
        cpu = worker.cpu - sum(r.cpu for r in used)
        memory = worker.memory_bytes - sum(r.memory_bytes for r in used)
        chips = worker.accelerators - sum(per_host_demand(r).chips for r in used)
        if cpu < need.cpu - 1e-9 or memory < need.memory or chips < need.chips:
            return f"host {h} is busy"
    return None
