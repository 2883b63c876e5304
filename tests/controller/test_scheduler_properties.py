"""Property test of the scheduling pass over random small fleets and workloads."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from iris.base.resources import Resources
from iris.controller.scheduling.constraints import matches_all, parse_constraints
from iris.controller.scheduling.model import (
    Band,
    Demand,
    HostView,
    RunningAttempt,
    TaskDemand,
    per_host_demand,
)
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import SchedulerConfig, schedule

GB = 10**9
RESOURCES = [Resources(cpu=1, memory="1GB"), Resources(cpu=3, memory="4GB"),
             Resources(cpu=4, tpu="v5litepod-4"), Resources(cpu=4, tpu="v5litepod-16"),
             Resources(cpu=2, gpu="H100", count=2)]
CONSTRAINTS = [None, {"region": "r1"}, {"zone": {"in": ["r2-a"]}}, {"preemptible": True}]


@st.composite
def fleets(draw):
    hosts, n = [], 0
    for region in ("r1", "r2"):
        for _ in range(draw(st.integers(0, 3))):
            running = tuple(RunningAttempt(f"a{n}-{k}", f"rt{n}-{k}", f"rj{k}", "zed",
                                           draw(st.sampled_from(list(Band))), Demand(2, GB))
                            for k in range(draw(st.integers(0, 2))))
            hosts.append(HostView(f"c{n}", region, f"{region}-a", Demand(4, 16 * GB),
                                  slice_id=f"c{n}", running=running,
                                  launch_slots=draw(st.integers(0, 3)),
                                  preemptible=draw(st.booleans()), held=draw(st.booleans())))
            n += 1
        for s in range(draw(st.integers(0, 2))):
            band = draw(st.sampled_from(list(Band)))
            for j in range(4):
                busy = draw(st.booleans())
                running = (RunningAttempt(f"t{n}", f"tt{n}", "tj", "zed", band,
                                          Demand(4, 0, 4)),) if busy else ()
                hosts.append(HostView(f"{region}-s{s}-h{j}", region, f"{region}-b",
                                      Demand(16, 64 * GB, 4), slice_id=f"{region}-s{s}",
                                      accelerator="v5litepod-16",
                                      accelerator_variant="v5litepod", preemptible=True,
                                      running=running))
                n += 1
        if draw(st.booleans()):
            hosts.append(HostView(f"g{n}", region, f"{region}-a", Demand(32, 64 * GB, 8),
                                  slice_id=f"g{n}", accelerator="H100"))
            n += 1
    return hosts


@st.composite
def workloads(draw):
    pending = []
    for j in range(draw(st.integers(0, 8))):
        res = draw(st.sampled_from(RESOURCES))
        cons = parse_constraints(draw(st.sampled_from(CONSTRAINTS)))
        band = draw(st.sampled_from(list(Band)))
        user = draw(st.sampled_from(["ann", "bob", "cy"]))
        size = res.gang_size
        count = size if size > 1 else draw(st.integers(1, 6))
        for t in range(count):
            pending.append(TaskDemand(f"j{j}-t{t}", f"j{j}", user, band, res, cons,
                                      f"j{j}-g" if size > 1 else None, size, float(j)))
    return pending


@settings(max_examples=300, deadline=None)
@given(hosts=fleets(), pending=workloads(), budget=st.integers(0, 4))
def test_schedule_random_workloads_keep_every_promise(hosts, pending, budget):
    plan = schedule(hosts, pending, config=SchedulerConfig(max_preemptions_per_pass=budget))
    by_id = {h.host_id: h for h in hosts}
    tasks = {t.task_id: t for t in pending}
    assigned = {a.task_id: a.host_id for a in plan.assignments}
    # Every task is assigned or has exactly one reason; gang tasks are never assigned here.
    assert set(assigned) | set(plan.reasons) == set(tasks)
    assert not set(assigned) & set(plan.reasons)
    assert all(tasks[t].gang_id is None for t in assigned)
    asked = {t for g in plan.gang_requests for t in g.task_ids}
    assert all(plan.reasons[t].code is ReasonCode.WAITING_FOR_GANG for t in asked)
    # No host is over-committed, held hosts get nothing, back-pressure is respected.
    per_host = Counter(assigned.values())
    for hid, n in per_host.items():
        h = by_id[hid]
        assert not h.held and n <= h.launch_slots
        used = [a.demand for a in h.running] + [
            per_host_demand(tasks[t].resources) for t, x in assigned.items() if x == hid]
        assert sum(d.cpu for d in used) <= h.capacity.cpu
        assert sum(d.memory for d in used) <= h.capacity.memory
        assert sum(d.chips for d in used) <= h.capacity.chips
    # Placements honour constraints; evictions only hit strictly lower bands, within budget.
    for t, hid in assigned.items():
        assert matches_all(tasks[t].constraints, by_id[hid].all_attributes())
    band_of_job = {t.job_id: t.band for t in pending}
    for p in plan.preemptions:
        assert p.band > band_of_job[p.for_job]
    assert len(plan.preemptions) <= budget

