"""A pass's gangs: each gang's tasks asked for whole, and where a gang could go this pass
(regions with whole free slices, or N idle hosts alike).

`GangSteps` is an object of one pass (scheduler.py's `_Pass` makes it): it owns the gang
caches of that pass (refusals, the forms of each ask, each request's alternatives) and the
gang requests it made, and reaches the pass only through the `PassLedger` interface (`mark`,
`charge`, `over_quota`, `scaling_reason`); the fleet and the preemptor are handed to it.
With fallbacks, the first alternative with free room is asked for before evicting for any.

Not the reservation itself: the pass names candidate regions, best first, and the gangs
object (gangs/tracking.py) reserves there through the coordinator. Topology-aware: when no
slice is free, a gang may evict lower-band work from a slice, counting every small job on
its hosts, because evicting several small jobs is what frees a large slice. Candidate
slices are blocked for the rest of the pass so two gangs are never pointed at the same
slice. Pure, like the pass.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Protocol

from iris.base.resources import Resources
from iris.controller.scheduling.fallbacks import combined_reason
from iris.controller.scheduling.fleet import Fleet, Pool
from iris.controller.scheduling.model import (
    Band,
    Demand,
    GangShape,
    TaskDemand,
    gang_shape,
    per_host_demand,
    pool_of,
)
from iris.controller.scheduling.preemption import Preemptor, Victim
from iris.controller.scheduling.reasons import PendingReason, ReasonCode


@dataclass(frozen=True, slots=True)
class GangRequest:
    """A gang the pass asks for (`need` per host, in `pool`) and, once `place_gang` found
    room, the regions to reserve it in (best first): one type from the ask to the tracker."""

    gang_id: str
    job_id: str
    band: Band
    task_ids: tuple[str, ...]
    shape: GangShape
    regions: tuple[str, ...] = ()
    # Hosts this pass set aside for the gang in its candidate regions: the controller keeps
    # them held (HostView.held) until the reservation settles, so later passes do not hand
    # them to smaller work while the regions answer.
    hosts: tuple[str, ...] = ()
    need: Demand = Demand()  # per host
    pool: Pool = ("cpu", None)


def task_pool(resources: Resources) -> Pool:
    shape = resources.tpu_slice
    if shape is not None:
        return ("tpu", shape.family)
    if resources.gpu:
        return ("gpu", resources.gpu)
    return ("cpu", None)


class PassLedger(Protocol):
    """What the gang steps may ask of their pass: its accounting and its reasons."""

    def mark(self, tasks: Sequence[TaskDemand], reason: PendingReason) -> None: ...

    def charge(self, user: str, band: Band, d: Demand, n: int) -> None: ...

    def over_quota(self, user: str, d: Demand, n: int) -> PendingReason | None: ...

    def scaling_reason(self, accel: str) -> PendingReason | None: ...


class GangSteps:
    """One pass's gang steps (see the module docstring). `requests`: the gangs it asked for."""

    def __init__(self, ledger: PassLedger, fleet: Fleet, pre: Preemptor,
                 reserving: Collection[str], max_gang_regions: int):
        self._ledger, self._fleet, self._pre = ledger, fleet, pre
        self._reserving = set(reserving)
        self._max_regions = max_gang_regions
        self.requests: list[GangRequest] = []
        self._failed_gangs: dict[tuple[object, ...], PendingReason] = {}
        self._failed_free: dict[tuple[object, ...], PendingReason] = {}  # fallbacks, no evicting
        self._slice_views: dict = {}  # a _SliceView per slice shape, this pass
        # id(Resources) -> (it, its alternatives); holding `it` keeps the id from reuse.
        self._alternatives: dict[int, tuple[Resources, list[Resources]]] = {}
        self._forms: dict[tuple[int, int, int], tuple] = {}  # (res, need, shape, pool)

    def place(self, job_id: str, user: str, band: Band, gang_id: str,
              tasks: list[TaskDemand]) -> None:
        """Ask for one gang of a job: a request, or its tasks marked with why not."""
        first = tasks[0]
        mark = self._ledger.mark
        if gang_id in self._reserving:
            mark(tasks, PendingReason(ReasonCode.WAITING_FOR_GANG,
                                      f"gang {gang_id} is being reserved", {"gang": gang_id}))
            return
        if len(tasks) < first.gang_size:
            mark(tasks, PendingReason(
                ReasonCode.WAITING_FOR_GANG,
                f"only {len(tasks)} of the {first.gang_size} tasks of gang {gang_id} are "
                "pending; a gang starts whole", {"gang": gang_id, "pending": len(tasks)}))
            return
        who = (job_id, user, band)
        if not first.resources.has_fallbacks:
            result = self._gang_on(who, gang_id, tasks, first.resources, self._failed_gangs)
            if not isinstance(result, GangRequest):
                mark(tasks, result)
            return
        options = self._options(first.resources)
        # Free room on any alternative beats evicting for the preferred one: a round with
        # no eviction budget first (its refusals cached apart: they are not final).
        with self._pre.no_evictions():
            for res in options:
                if isinstance(self._gang_on(who, gang_id, tasks, res, self._failed_free),
                              GangRequest):
                    return
        reasons = []
        for res in options:
            result = self._gang_on(who, gang_id, tasks, res, self._failed_gangs)
            if isinstance(result, GangRequest):
                return
            if result.code is ReasonCode.PREEMPTING:
                mark(tasks, result)
                return
            reasons.append(result)
        mark(tasks, combined_reason(first.resources.tpu_alternatives, reasons))

    def _options(self, res: Resources) -> list[Resources]:
        """Each alternative of a fallback request as its own Resources, once per pass."""
        found = self._alternatives.get(id(res))
        if found is None:
            found = self._alternatives[id(res)] = (res, [res.choose(a) for a in
                                                        res.tpu_alternatives])
        return found[1]

    def _gang_on(self, who: tuple[str, str, Band], gang_id: str, tasks: list[TaskDemand],
                 res: Resources, failed: dict[tuple[object, ...], PendingReason]
                 ) -> GangRequest | PendingReason:
        """Ask for the gang on one accelerator type; a request is recorded (and its tasks
        marked) here, a refusal is returned for the caller to show."""
        job_id, user, band = who
        form_key = (id(res), len(tasks), id(tasks[0].constraints))
        form = self._forms.get(form_key)
        if form is None or form[0] is not res:
            form = self._forms[form_key] = (res, per_host_demand(res), gang_shape(
                res, len(tasks), tasks[0].constraints), task_pool(res))
        _, need, shape, pool = form
        ledger = self._ledger
        quota = ledger.over_quota(user, need, len(tasks))
        if quota is not None:
            return quota
        known = failed.get((shape, band, need, pool))
        if known is not None:  # what place_gang would answer from its cache, sooner
            return known
        ask = GangRequest(gang_id, job_id, band, tuple(t.task_id for t in tasks),
                          shape, need=need, pool=pool)
        result = place_gang(self._fleet, self._pre, ask, self._max_regions, failed,
                            self._slice_views)
        if isinstance(result, GangRequest):
            self.requests.append(result)
            ledger.charge(user, band, need, len(tasks))
            ledger.mark(tasks, PendingReason(
                ReasonCode.WAITING_FOR_GANG,
                f"reserving gang {gang_id} in {', '.join(result.regions)}",
                {"gang": gang_id, "regions": list(result.regions)}))
            return result
        if result.code is ReasonCode.NO_CAPACITY:
            result = ledger.scaling_reason(shape.accelerator or "cpu") or result
        return result


def place_gang(fleet: Fleet, pre: Preemptor, ask: GangRequest, max_regions: int,
               failed: dict[tuple[object, ...], PendingReason],
               views: dict | None = None) -> GangRequest | PendingReason:
    """`failed` remembers shapes that found no room this pass: capacity and the eviction
    budget only shrink during a pass, so the next gang of that shape and band would fail
    the same way (without it 2,000 waiting gangs each scanned every slice: 2 s a pass).
    `views` (one dict per pass): each slice shape's matching slices and those still free
    (`_SliceView`), so a gang looks at the free slices left, not at every slice."""
    key = (ask.shape, ask.band, ask.need, ask.pool)
    known = failed.get(key)
    if known is not None:
        return known
    if ask.shape.whole_slices:
        result = _slices(fleet, pre, ask, max_regions, {} if views is None else views)
    else:
        result = _hosts_alike(fleet, ask, max_regions)
    if isinstance(result, PendingReason) and result.code is not ReasonCode.PREEMPTING:
        failed[key] = result
    return result


def _request(ask: GangRequest, regions: list[str], hosts: list[str]) -> GangRequest:
    return replace(ask, regions=tuple(regions), hosts=tuple(hosts))


class _SliceView:
    """One slice shape (accelerator, hosts per slice, constraints) in one pass: the slices
    that match it and, by region, those still free (in order). A pass only ever takes hosts
    (usable hosts become unusable, never the other way) and logs each (`Fleet.touched`), so
    a look after the first drops the slices of the hosts touched since the last: the result
    equals a scan of every matching slice, at the cost of what changed."""

    __slots__ = ("free", "reason", "slices", "_region", "_seen")

    def __init__(self, fleet: Fleet, shape: GangShape):
        self.slices: list[str] = []
        self.free: dict[str, dict[str, None]] = {}  # region -> its free slices, in order
        self.reason: PendingReason | None = None
        self._region: dict[str, str] = {}  # slice id -> region, of the matching slices
        self._seen: int | None = None  # len(fleet.touched) at the last look; None: no look
        per_slice = shape.hosts // shape.whole_slices
        typed = [s for s in fleet.slices_by_type.get(shape.accelerator, ())
                 if len(fleet.slices[s]) == per_slice]
        if not typed:
            self.reason = PendingReason(
                ReasonCode.NO_CAPACITY, f"no complete {shape.accelerator} slice in any region",
                {"accelerator": shape.accelerator, "slices": shape.whole_slices})
            return
        matching, bad = fleet.matching(shape.constraints,
                                       within={fleet.slices[s][0] for s in typed})
        self.slices = [s for s in typed if fleet.slices[s][0] in matching]
        if not self.slices:
            what = bad.describe() if bad else "the constraints"
            self.reason = PendingReason(
                ReasonCode.CONSTRAINT_UNMATCHED,
                f"constraint {what} matches no {shape.accelerator} slice",
                {"constraint": what, "accelerator": shape.accelerator})
        for s in self.slices:
            region = self._region[s] = _region(fleet, s)
            self.free.setdefault(region, {})[s] = None

    def free_now(self, fleet: Fleet) -> dict[str, dict[str, None]]:
        """Region -> its slices free now, in order (not to be changed by the caller)."""
        slices, touched = fleet.slices, fleet.touched
        if self._seen is None:
            usable = fleet.usable_whole
            for ss in self.free.values():
                for s in [s for s in ss if not all(usable(i) for i in slices[s])]:
                    del ss[s]
        else:
            hosts, regions = fleet.hosts, self._region
            for i in touched[self._seen:]:
                s = hosts[i].slice_id
                region = regions.get(s)
                if region is not None:
                    self.free.get(region, {}).pop(s, None)
        self._seen = len(touched)
        self.free = {r: ss for r, ss in self.free.items() if ss}
        return self.free


def _slices(fleet: Fleet, pre: Preemptor, ask: GangRequest, max_regions: int,
            views: dict) -> GangRequest | PendingReason:
    shape = ask.shape
    key = (shape.accelerator, shape.hosts // shape.whole_slices, shape.constraints)
    view = views.get(key)
    if view is None:
        view = views[key] = _SliceView(fleet, shape)
    if view.reason is not None:
        return view.reason
    slices = view.slices
    free_now = view.free_now(fleet)
    want = shape.whole_slices
    regions = sorted((r for r, ss in free_now.items() if len(ss) >= want),
                     key=lambda r: (-len(free_now[r]), r))[:max_regions]
    if regions:
        taken = [s for r in regions for s in islice(free_now[r], want)]
        held = []
        for s in taken:  # blocking changes the view's next look, not this list
            _block(fleet, s)
            held += [fleet.hosts[i].host_id for i in fleet.slices[s]]
        return _request(ask, regions, held)
    free = {r: list(ss) for r, ss in free_now.items()}
    # No budget left (or a fallback's no-eviction round): costing every victim is wasted.
    evicting = _preempt_for_slices(fleet, pre, ask, slices, free) if pre.budget > 0 else None
    if evicting is not None:
        return evicting
    return PendingReason(ReasonCode.NO_CAPACITY, _short_of_slices(fleet, shape, slices, free),
                         {"accelerator": shape.accelerator, "slices": want,
                          "matching_slices": len(slices),
                          "free_by_region": {r: len(ss) for r, ss in sorted(free.items())}})


def _short_of_slices(fleet: Fleet, shape: GangShape, slices: list[str],
                     free: dict[str, list[str]]) -> str:
    """"needs 2 whole v5litepod-16 slices in one region; us-central1 has 1 free": what the
    user must know is how far the best region is from enough."""
    want, acc = shape.whole_slices, shape.accelerator
    if want == 1:
        return (f"no region has a free {acc} slice; {len(slices)} matching slices are busy "
                "with work of an equal or higher band")
    if not free:
        return (f"needs {want} whole {acc} slices in one region; none is free "
                f"({len(slices)} matching slices are busy with work of an equal or higher band)")
    region = max(free, key=lambda r: (len(free[r]), r))
    return (f"needs {want} whole {acc} slices in one region; {region} has "
            f"{len(free[region])} free")


def _preempt_for_slices(fleet: Fleet, pre: Preemptor, ask: GangRequest, slices: list[str],
                        free: dict[str, list[str]]) -> PendingReason | None:
    want = ask.shape.whole_slices
    options: dict[str, list[tuple[int, str, list[Victim]]]] = {}
    for s in slices:
        if s in free.get(_region(fleet, s), ()):
            options.setdefault(_region(fleet, s), []).append((0, s, []))
            continue
        victims = pre.slice_victims(fleet.slices[s], ask.band)
        if victims is not None:
            options.setdefault(_region(fleet, s), []).append((pre.cost(victims), s, victims))
    best: tuple[int, str, list[tuple[int, str, list[Victim]]]] | None = None
    for region, opts in options.items():
        if len(opts) < want:
            continue
        # Cheapest first; then the slice whose work loses the least (least since its
        # last checkpoint when intervals are known, else the one that started last).
        chosen = sorted(opts, key=lambda o: (o[0], pre.at_risk(o[2]), o[1]))[:want]
        cost = sum(o[0] for o in chosen)
        if cost <= pre.budget and (best is None or (cost, region) < (best[0], best[1])):
            best = (cost, region, chosen)
    if best is None:
        return None
    cost, region, chosen = best
    for _, s, victims in chosen:
        pre.evict(victims, ask.job_id, f"gang {ask.gang_id} needs whole slice {s}")
        _block(fleet, s)
    return PendingReason(ReasonCode.PREEMPTING,
                         f"evicting {cost} lower-band attempt(s) to free {want} "
                         f"{ask.shape.accelerator} slice(s) in {region}",
                         {"region": region, "slices": [s for _, s, _ in chosen],
                          "evicted": cost})


def _hosts_alike(fleet: Fleet, ask: GangRequest, max_regions: int) -> GangRequest | PendingReason:
    pool = fleet.pools.get(ask.pool, [])
    if not pool:  # no host of the kind at all: growth can help (an empty GPU pool must
        # scale up, as a single GPU task's does), a constraint cannot be the reason
        accel = ask.shape.accelerator or "cpu"
        return PendingReason(ReasonCode.NO_CAPACITY, f"no {accel} worker in any region",
                             {"accelerator": accel, "hosts": ask.shape.hosts})
    matching, bad = fleet.matching(ask.shape.constraints, within=set(pool))
    if not matching:
        what = bad.describe() if bad else f"accelerator {ask.shape.accelerator or 'none'}"
        return PendingReason(ReasonCode.CONSTRAINT_UNMATCHED,
                             f"constraint {what} matches no worker", {"constraint": what})
    cap = ask.need
    # (region, pool) -> idle hosts; the pool is "" unless the gang must share one (GPUs).
    groups: dict[tuple[str, str], list[int]] = {}
    for i in sorted(matching):
        h = fleet.hosts[i]
        c = h.capacity
        if (fleet.usable_whole(i) and c.cpu >= cap.cpu and c.memory >= cap.memory
                and c.chips >= cap.chips):
            pool = pool_of(h.all_attributes()) if ask.shape.one_pool else ""
            groups.setdefault((h.region, pool), []).append(i)
    n = ask.shape.hosts
    best: dict[str, tuple[str, str]] = {}  # region -> its largest group that fits
    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        if len(groups[key]) >= n:
            best.setdefault(key[0], key)
    regions = sorted(best, key=lambda r: (-len(groups[best[r]]), r))[:max_regions]
    if not regions:
        where = " in one pool" if ask.shape.one_pool else ""
        most = max((len(hs) for hs in groups.values()), default=0)
        return PendingReason(ReasonCode.NO_CAPACITY,
                             f"needs {n} idle {ask.shape.accelerator or 'cpu'} hosts{where} "
                             f"of one region; the most free together is {most}",
                             {"hosts": n, "accelerator": ask.shape.accelerator,
                              "most_free": most})
    held = []
    for r in regions:
        for i in groups[best[r]][:n]:
            fleet.block(i)
            held.append(fleet.hosts[i].host_id)
    return _request(ask, regions, held)


def _region(fleet: Fleet, slice_id: str) -> str:
    return fleet.hosts[fleet.slices[slice_id][0]].region


def _block(fleet: Fleet, slice_id: str) -> None:
    for i in fleet.slices[slice_id]:
        fleet.block(i)
