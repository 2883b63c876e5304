"""The pass's slice views (gang_placement._SliceView) change nothing the pass decides: over
random fleets (slices in three regions, some held), gangs of one and two slices, with and
without region constraints, and single-host TPU tasks that take slice hosts mid-pass, the
plan equals the plan of a pass that scans every matching slice for every gang."""

from __future__ import annotations

import random

import pytest

from iris.base.resources import Resources
from iris.controller.scheduling import gang_placement
from iris.controller.scheduling.constraints import parse_constraints
from iris.controller.scheduling.model import Band, Demand, HostView, TaskDemand
from iris.controller.scheduling.scheduler import schedule

GB = 10**9
REGIONS = ("r1", "r2", "r3")


def _fleet(rng: random.Random) -> list[HostView]:
    hosts = []
    for s in range(rng.randint(3, 24)):
        region, held = rng.choice(REGIONS), rng.random() < 0.15
        hosts += [HostView(f"s{s}-h{j}", region, f"{region}-a", Demand(32, 128 * GB, 4),
                           slice_id=f"s{s}", accelerator="v5litepod-16",
                           accelerator_variant="v5litepod", held=held and j == 0)
                  for j in range(4)]
    return hosts


def _work(rng: random.Random) -> list[TaskDemand]:
    tasks: list[TaskDemand] = []
    for j in range(rng.randint(1, 30)):
        job, user = f"j{j:02}", rng.choice(["ann", "bob"])
        band = rng.choice([Band.BATCH, Band.PRODUCTION])
        kind = rng.random()
        cons = parse_constraints({"region": rng.choice(REGIONS)}) if rng.random() < 0.3 else ()
        if kind < 0.25:  # a single-host TPU task: it packs onto a slice's host
            res = Resources(cpu=1, tpu="v5litepod-4")
            tasks.append(TaskDemand(f"{job}-t0", job, user, band, res, cons, None, 1, j))
            continue
        res = Resources(cpu=1, tpu="v5litepod-16", count=2 if kind > 0.8 else 1)
        tasks += [TaskDemand(f"{job}-t{i}", job, user, band, res, cons, f"{job}-g",
                             res.gang_size, j) for i in range(res.gang_size)]
    return tasks


def _plan(plan) -> tuple:
    return (sorted((g.gang_id, g.regions, g.hosts) for g in plan.gang_requests),
            sorted((a.task_id, a.host_id) for a in plan.assignments),
            sorted((t, r.code, r.message) for t, r in plan.reasons.items()))


@pytest.mark.parametrize("seed", range(60))
def test_slice_views_plan_as_a_scan_of_every_slice_would(seed, monkeypatch):
    rng = random.Random(seed)
    hosts, work = _fleet(rng), _work(rng)
    with_views = _plan(schedule(hosts, work))
    monkeypatch.setattr(gang_placement._SliceView, "free_now", _scan_every_slice)
    assert _plan(schedule(hosts, work)) == with_views


def _scan_every_slice(view, fleet) -> dict[str, list[str]]:
    """The free slices as the pass found them before the views: every matching slice."""
    free: dict[str, list[str]] = {}
    for s in view.slices:
        if all(fleet.usable_whole(i) for i in fleet.slices[s]):
            free.setdefault(fleet.hosts[fleet.slices[s][0]].region, []).append(s)
    return free
