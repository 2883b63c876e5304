"""Routing unmet demand to one region's autoscaler per job."""

from __future__ import annotations

from iris.controller.config import ScaleGroupConfig
from iris.controller.regions.demand import route
from tests.controller.test_job_support import spec


def _tpu(region: str, priority: int = 0) -> ScaleGroupConfig:
    return ScaleGroupConfig("v5e-16", region, "tpu", "v5litepod-16", 4, 4, (f"{region}-a",),
                            max_slices=4, priority=priority)


def _cpu(region: str) -> ScaleGroupConfig:
    return ScaleGroupConfig("cpu", region, "cpu", None, 1, 0, (f"{region}-a",), max_slices=8)


GROUPS = {"us-east": [_tpu("us-east"), _cpu("us-east")], "eu-west": [_tpu("eu-west", 5)]}
GANG = {"tpu": "v5litepod-16"}


def test_route_gang_goes_to_the_region_whose_group_has_the_best_priority():
    job = spec("g", resources=GANG, replicas=2)  # two whole slices
    assert route([(job, 8)], GROUPS, {}) == {"eu-west": {"v5e-16": 2}}


def test_route_skips_a_region_holding_that_accelerator_back():
    job = spec("g", resources=GANG)
    blocked = {"eu-west": {"v5litepod-16": "group v5e-16: zone eu-west-a stocked out"}}
    assert route([(job, 4)], GROUPS, blocked) == {"us-east": {"v5e-16": 1}}


def test_route_respects_a_region_constraint():
    job = spec("g", resources=GANG, constraints={"region": "us-east"})
    assert route([(job, 4)], GROUPS, {}) == {"us-east": {"v5e-16": 1}}


def test_route_cpu_tasks_go_to_a_cpu_group_one_host_each_when_cores_are_unknown():
    job = spec("c", resources={"cpu": 2}, replicas=3)
    assert route([(job, 3)], GROUPS, {}) == {"us-east": {"cpu": 3}}


def test_route_work_no_group_can_run_asks_for_nothing():
    job = spec("h", resources={"gpu": "H100", "count": 8})
    assert route([(job, 1)], GROUPS, {}) == {}


def test_held_back_names_every_region_that_could_grow_but_holds_back():
    from iris.controller.regions.demand import held_back

    job = spec("g", resources=GANG)
    blocked = {"eu-west": {"v5litepod-16": "zone eu-west-a stocked out"},
               "us-east": {"v5litepod-16": "at max_slices 4"}}
    assert held_back(job, GROUPS, blocked) == {"eu-west": "zone eu-west-a stocked out",
                                               "us-east": "at max_slices 4"}
    assert held_back(job, GROUPS, {"eu-west": blocked["eu-west"]}) == {}  # us-east can grow


def test_route_family_work_skips_a_held_group_for_one_that_can_grow():
    """Single-host v5e work goes to the best group of the family that is not holding back
    (with the family itself unblocked in a region, its held v5e-4 group must not take the
    demand, or nothing grows)."""
    small = ScaleGroupConfig("v5e-4", "us-east", "tpu", "v5litepod-4", 1, 4, ("us-east-a",),
                             max_slices=8, priority=1)
    groups = {"us-east": [small, _tpu("us-east")]}
    job = spec("s", resources={"tpu": "v5litepod-4"}, replicas=2)
    assert route([(job, 2)], groups, {}) == {"us-east": {"v5e-4": 2}}
    held = {"us-east": {"v5litepod-4": "group v5e-4: zone us-east-a stocked out"}}
    assert route([(job, 2)], groups, held) == {"us-east": {"v5e-16": 1}}


def test_route_spreads_a_burst_over_equally_preferred_regions_and_a_block_moves_only_its_jobs():
    """Each job's asks go to one region, but not every job to the same one: a burst of 20
    gangs tries both open regions at once, instead of filling the first by name, failing a
    create there and only then moving on (bench.daytrace default day, with checkpoint-aware
    eviction: 88.9% of the upper bound; quota free while fitting work waited 300 -> 194
    chip-hours). The choice is stable, and blocking one region moves only the jobs it had."""
    groups = {"us-east": [_tpu("us-east")], "eu-west": [_tpu("eu-west")]}
    jobs = [(spec(f"g{i}", resources=GANG), 4) for i in range(20)]
    wanted = route(jobs, groups, {})
    assert set(wanted) == {"us-east", "eu-west"}
    assert sum(r["v5e-16"] for r in wanted.values()) == 20
    assert route(jobs, groups, {}) == wanted  # the same asks, the same regions
    blocked = {"eu-west": {"v5litepod-16": "group v5e-16: zone eu-west-a stocked out"}}
    assert route(jobs, groups, blocked) == {"us-east": {"v5e-16": 20}}
    groups["ap-south"] = [_tpu("ap-south")]
    before = {job.name: set(route([(job, n)], groups, {})) for job, n in jobs}
    after = {job.name: set(route([(job, n)], groups, blocked)) for job, n in jobs}
    assert {r for rs in before.values() for r in rs} == set(groups)
    moved = {name for name in before if before[name] != after[name]}
    assert moved == {name for name, rs in before.items() if rs == {"eu-west"}}
