"""Where a gang could go this pass: regions with whole free slices (or N idle hosts alike).

Not the reservation itself: the scheduler names candidate regions, best first, and the
coordinator reserves there. Topology-aware: when no slice is free, a gang may evict
lower-band work from a slice, counting every small job on its hosts, because evicting
several small jobs is what frees a large slice. Candidate slices are blocked for the
rest of the pass so two gangs are never pointed at the same slice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from iris.controller.scheduling.fleet import Fleet, Pool
from iris.controller.scheduling.model import Band, Demand, GangShape, pool_of
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
    that match it and, by region, those still free. A pass only ever takes hosts (usable
    hosts become unusable, never the other way), so the free slices now are those of the
    last look still free: each look filters the last one's (order kept), and the result
    equals a scan of every matching slice, at the cost of the free ones left."""

    __slots__ = ("free", "reason", "slices")

    def __init__(self, fleet: Fleet, shape: GangShape):
        self.slices: list[str] = []
        self.free: dict[str, list[str]] = {}
        self.reason: PendingReason | None = None
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
            self.free.setdefault(_region(fleet, s), []).append(s)

    def free_now(self, fleet: Fleet) -> dict[str, list[str]]:
        slices, usable = fleet.slices, fleet.usable_whole
        free = {r: [s for s in ss if all(usable(i) for i in slices[s])]
                for r, ss in self.free.items()}
        self.free = {r: ss for r, ss in free.items() if ss}
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
    free = {r: list(ss) for r, ss in view.free_now(fleet).items()}
    want = shape.whole_slices
    regions = sorted((r for r, ss in free.items() if len(ss) >= want),
                     key=lambda r: (-len(free[r]), r))[:max_regions]
    if regions:
        held = []
        for r in regions:
            for s in free[r][:want]:
                _block(fleet, s)
                held += [fleet.hosts[i].host_id for i in fleet.slices[s]]
        return _request(ask, regions, held)
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
            fleet.blocked[i] = True
            held.append(fleet.hosts[i].host_id)
    return _request(ask, regions, held)


def _region(fleet: Fleet, slice_id: str) -> str:
    return fleet.hosts[fleet.slices[slice_id][0]].region


def _block(fleet: Fleet, slice_id: str) -> None:
    for i in fleet.slices[slice_id]:
        fleet.blocked[i] = True
