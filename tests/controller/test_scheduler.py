"""Kernel tests of one scheduling pass: fit, constraints, bands, preemption, gangs, fairness."""

from __future__ import annotations

from collections import Counter

from iris.base.resources import Resources
from iris.controller.scheduling.constraints import parse_constraints
from iris.controller.scheduling.dry_run import dry_run
from iris.controller.scheduling.model import (
    Band,
    Demand,
    HostView,
    Quota,
    RunningAttempt,
    TaskDemand,
)
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import SchedulerConfig, schedule

GB = 10**9
SMALL = Resources(cpu=1, memory="1GB")
V5E_16 = Resources(cpu=8, tpu="v5litepod-16")  # a gang of 4 hosts, 4 chips each
V5E_4 = Resources(cpu=8, tpu="v5litepod-4")    # one host, 4 chips


def cpu_host(hid, region="r1", zone="r1-a", cpu=4, running=(), slots=1000, **kw):
    return HostView(hid, region, zone, Demand(cpu, 16 * GB), slice_id=hid, running=running,
                    launch_slots=slots, **kw)


def tpu_slice(sid, region="r1", running=None):
    running = running or {}
    return [HostView(f"{sid}-h{j}", region, f"{region}-b", Demand(32, 128 * GB, 4),
                     slice_id=sid, accelerator="v5litepod-16", accelerator_variant="v5litepod",
                     preemptible=True, running=tuple(running.get(j, ())))
            for j in range(4)]


def task(tid, job="j1", user="alice", band=Band.BATCH, res=SMALL, cons=None, gang=None,
         size=1, at=0.0):
    return TaskDemand(tid, job, user, band, res, parse_constraints(cons), gang, size, at)


def gang_tasks(job, band=Band.BATCH, user="alice", res=V5E_16):
    return [task(f"{job}-t{i}", job, user, band, res, gang=f"{job}-g", size=res.gang_size)
            for i in range(res.gang_size)]


def attempt(aid, band=Band.BATCH, cpu=4.0, chips=0, job="old", user="bob", gang=None,
            terminating=False):
    return RunningAttempt(aid, f"{aid}-task", job, user, band, Demand(cpu, 0, chips), gang,
                          terminating)


def placed(plan):
    return {a.task_id: a.host_id for a in plan.assignments}


# ---- fit and constraints -----------------------------------------------------------

def test_schedule_fits_tasks_on_cpu_and_memory_until_full():
    plan = schedule([cpu_host("h1", cpu=2)], [task(f"t{i}") for i in range(3)])
    assert sorted(placed(plan)) == ["t0", "t1"]
    reason = plan.reasons["t2"]
    assert reason.code is ReasonCode.NO_CAPACITY and "cpu=1" in reason.message


def test_no_room_reason_says_busy_only_for_workers_large_enough_and_sizes_in_human_units():
    hosts = [cpu_host("small", cpu=1),
             cpu_host("big", cpu=4, running=(attempt("a1", band=Band.PRODUCTION),))]
    need = Resources(cpu=2, memory=3 << 30)
    reason = schedule(hosts, [task("t1", res=need)]).reasons["t1"]
    assert reason.code is ReasonCode.NO_CAPACITY
    assert "memory=3 GiB" in reason.message  # never a raw byte count
    assert "1 large enough but busy; 1 too small for it" in reason.message
    assert "full" not in reason.message


def test_schedule_every_task_is_assigned_or_has_a_reason():
    hosts = [cpu_host("h1", cpu=3), *tpu_slice("s1")]
    pending = [task(f"t{i}", res=Resources(cpu=i % 3 + 1)) for i in range(10)]
    pending += gang_tasks("g1") + gang_tasks("g2")
    plan = schedule(hosts, pending)
    assert set(placed(plan)) | set(plan.reasons) == {t.task_id for t in pending}
    assert not set(placed(plan)) & set(plan.reasons)


def test_schedule_cpu_task_never_lands_on_accelerator_host():
    plan = schedule(tpu_slice("s1"), [task("t1")])
    assert plan.assignments == []
    assert plan.reasons["t1"].code is ReasonCode.NO_CAPACITY
    assert "no cpu worker" in plan.reasons["t1"].message


def test_schedule_constraints_pick_matching_region_zone_and_attribute():
    hosts = [cpu_host("a", "r1", "r1-a"), cpu_host("b", "r2", "r2-a"),
             cpu_host("c", "r2", "r2-b", attributes={"tier": "spot"})]
    plan = schedule(hosts, [
        task("t1", job="j1", cons={"region": "r2", "zone": {"in": ["r2-b"]}}),
        task("t2", job="j2", cons={"tier": {"exists": False}, "region": {"ne": "r1"}}),
    ])
    assert placed(plan) == {"t1": "c", "t2": "b"}


def test_schedule_unmatched_constraint_is_named_in_the_reason():
    plan = schedule([cpu_host("a", "r1")], [task("t1", cons={"region": "mars"})])
    reason = plan.reasons["t1"]
    assert reason.code is ReasonCode.CONSTRAINT_UNMATCHED
    assert "region == mars" in reason.message and reason.details["constraint"]


def test_schedule_gpu_task_needs_that_gpu_model_with_enough_free_gpus():
    h100 = HostView("g1", "r1", "r1-a", Demand(64, 512 * GB, 8), accelerator="H100",
                    running=(attempt("x", chips=6, cpu=1),))
    plan = schedule([h100], [task("t1", job="j1", res=Resources(gpu="H100", count=2)),
                             task("t2", job="j2", res=Resources(gpu="H100", count=1)),
                             task("t3", job="j3", res=Resources(gpu="A100", count=1))])
    assert placed(plan) == {"t1": "g1"}
    assert plan.reasons["t2"].code is ReasonCode.NO_CAPACITY
    assert "no A100 worker" in plan.reasons["t3"].message


# ---- bands, fairness, head-of-line, back-pressure, quota ----------------------------

def test_schedule_production_band_goes_before_earlier_batch_work():
    plan = schedule([cpu_host("h1", cpu=1)], [
        task("batch", job="jb", band=Band.BATCH, at=0.0),
        task("prod", job="jp", band=Band.PRODUCTION, at=9.0),
    ])
    assert placed(plan) == {"prod": "h1"}


def test_schedule_fair_share_splits_slots_between_users_in_a_band():
    pending = [task(f"a{i}", job="ja", user="alice", at=0.0) for i in range(10)]
    pending += [task(f"b{i}", job="jb", user="bob", at=5.0) for i in range(10)]
    plan = schedule([cpu_host("h1", cpu=4)], pending)
    assert Counter(t[0] for t in placed(plan)) == {"a": 2, "b": 2}


def test_schedule_fair_share_counts_what_users_already_run():
    busy = cpu_host("h0", cpu=4, running=(attempt("x", cpu=4, user="alice"),))
    pending = [task(f"a{i}", job="ja", user="alice") for i in range(4)]
    pending += [task(f"b{i}", job="jb", user="bob", at=5.0) for i in range(4)]
    plan = schedule([busy, cpu_host("h1", cpu=4)], pending)
    assert Counter(t[0] for t in placed(plan)) == {"b": 4}


def test_schedule_big_task_that_does_not_fit_does_not_block_smaller_ones():
    plan = schedule([cpu_host("h1", cpu=4)], [
        task("huge", job="j1", res=Resources(cpu=64), at=0.0),
        task("small", job="j2", res=Resources(cpu=1), at=1.0),
    ])
    assert placed(plan) == {"small": "h1"}
    assert plan.reasons["huge"].code is ReasonCode.NO_CAPACITY


def test_schedule_back_pressure_limits_new_attempts_per_worker():
    plan = schedule([cpu_host("h1", cpu=8, slots=2)], [task(f"t{i}") for i in range(4)])
    assert len(plan.assignments) == 2
    assert plan.reasons["t3"].code is ReasonCode.WORKERS_BUSY


def test_schedule_quota_stops_a_user_and_says_so():
    config = SchedulerConfig(quotas={"alice": Quota(cpu=2)})
    pending = [task(f"a{i}", job="ja", user="alice") for i in range(3)] + [task("b0", job="jb",
                                                                                user="bob")]
    plan = schedule([cpu_host("h1", cpu=8)], pending, config=config)
    assert sorted(placed(plan)) == ["a0", "a1", "b0"]
    assert plan.reasons["a2"].code is ReasonCode.OVER_QUOTA


def test_schedule_no_capacity_while_scaling_says_where():
    plan = schedule([], [task("t1")], scaling_up={"cpu": ["r2"]})
    assert plan.reasons["t1"].code is ReasonCode.SCALING_UP
    assert plan.reasons["t1"].details["regions"] == ["r2"]


# ---- preemption ----------------------------------------------------------------------

def test_schedule_production_evicts_batch_and_waits_for_the_room():
    full = cpu_host("h1", cpu=4, running=(attempt("b1", Band.BATCH, cpu=4),))
    plan = schedule([full], [task("p1", band=Band.PRODUCTION, res=Resources(cpu=2))])
    assert [p.attempt_id for p in plan.preemptions] == ["b1"]
    assert plan.preemptions[0].for_job == "j1"
    assert plan.reasons["p1"].code is ReasonCode.PREEMPTING
    assert plan.assignments == []


def test_schedule_never_evicts_equal_or_higher_bands():
    full = cpu_host("h1", cpu=4, running=(attempt("i1", Band.INTERACTIVE, cpu=2),
                                          attempt("p1", Band.PRODUCTION, cpu=2)))
    plan = schedule([full], [task("x1", job="jx", band=Band.INTERACTIVE),
                             task("x2", job="jy", band=Band.BATCH)])
    assert plan.preemptions == []
    assert {r.code for r in plan.reasons.values()} == {ReasonCode.NO_CAPACITY}


def test_schedule_terminating_attempt_is_not_evicted_twice():
    full = cpu_host("h1", cpu=4, running=(attempt("b1", cpu=4, terminating=True),))
    plan = schedule([full], [task("p1", band=Band.PRODUCTION)])
    assert plan.preemptions == []
    assert plan.reasons["p1"].code is ReasonCode.PREEMPTING
    assert "waiting" in plan.reasons["p1"].message


def test_schedule_evicting_a_gang_member_evicts_the_whole_gang():
    hosts = tpu_slice("s1", running={j: [attempt(f"g{j}", chips=4, cpu=8, gang="old-g")]
                                     for j in range(4)})
    plan = schedule(hosts, [task("p1", band=Band.PRODUCTION, res=V5E_4)])
    assert sorted(p.attempt_id for p in plan.preemptions) == ["g0", "g1", "g2", "g3"]


def test_schedule_eviction_prefers_the_cheapest_host():
    big = cpu_host("h1", cpu=4, running=(attempt("a", cpu=1), attempt("b", cpu=1),
                                         attempt("c", cpu=2)))
    one = cpu_host("h2", cpu=4, running=(attempt("d", cpu=4),))
    plan = schedule([big, one], [task("p1", band=Band.PRODUCTION, res=Resources(cpu=4))])
    assert [p.attempt_id for p in plan.preemptions] == ["d"]


def _started(aid, at, every=None, **kw):
    a = attempt(aid, **kw)
    return RunningAttempt(a.attempt_id, a.task_id, a.job_id, a.user, a.band, a.demand,
                          a.gang_id, a.terminating, started_at=at, checkpoint_every=every)


def test_schedule_eviction_among_equal_costs_takes_the_attempt_that_started_last():
    """Evicting loses the work since the last checkpoint; an attempt that started minutes
    ago has the least of it (bench.daytrace default day: wasted 2,241 -> 1,959 chip-hours)."""
    old = cpu_host("h1", cpu=4, running=(_started("old", 100.0, cpu=4),))
    young = cpu_host("h2", cpu=4, running=(_started("young", 5_000.0, cpu=4),))
    plan = schedule([old, young], [task("p1", band=Band.PRODUCTION, res=Resources(cpu=4))])
    assert [p.attempt_id for p in plan.preemptions] == ["young"]


def test_schedule_gang_eviction_frees_the_slice_whose_work_started_last():
    def busy(sid, at):
        return tpu_slice(sid, running={j: [_started(f"{sid}{j}", at, chips=4, cpu=8,
                                                    gang=f"{sid}-g")] for j in range(4)})
    plan = schedule(busy("a-old", 100.0) + busy("z-new", 5_000.0),
                    gang_tasks("big", band=Band.PRODUCTION))
    assert sorted(p.attempt_id for p in plan.preemptions) == [f"z-new{j}" for j in range(4)]


def test_schedule_eviction_takes_the_attempt_with_the_least_work_since_its_checkpoint():
    """With the pass's time and each job's checkpoint interval, the victim is the attempt
    that loses least: one that ran 10,010 s but checkpoints every 1,000 s risks 10 s; one
    that started 500 s ago and never checkpointed yet risks all 500 s (bench.daytrace
    default day: wasted by evictions 312 -> 218 chip-hours)."""
    long_run = cpu_host("h1", cpu=4, running=(_started("ran-long", 0.0, 1_000.0, cpu=4),))
    young = cpu_host("h2", cpu=4, running=(_started("young", 9_510.0, 3_600.0, cpu=4),))
    prod = [task("p1", band=Band.PRODUCTION, res=Resources(cpu=4))]
    plan = schedule([long_run, young], prod, now=10_010.0)
    assert [p.attempt_id for p in plan.preemptions] == ["ran-long"]
    # Without the pass's time the old rule stands: the one that started last.
    assert [p.attempt_id for p in schedule([long_run, young], prod).preemptions] == ["young"]


def test_schedule_gang_eviction_frees_the_slice_that_checkpointed_last():
    def busy(sid, at, every):
        return tpu_slice(sid, running={j: [_started(f"{sid}{j}", at, every, chips=4, cpu=8,
                                                    gang=f"{sid}-g")] for j in range(4)})
    # a: started at 0, checkpoints every 600 s: at 6,030 it risks 30 s. z: started at
    # 5,000 with a 1,800 s interval: it risks 1,030 s.
    plan = schedule(busy("a-saved", 0.0, 600.0) + busy("z-new", 5_000.0, 1_800.0),
                    gang_tasks("big", band=Band.PRODUCTION), now=6_030.0)
    assert sorted(p.attempt_id for p in plan.preemptions) == [f"a-saved{j}" for j in range(4)]


def test_schedule_eviction_budget_bounds_evictions_per_pass():
    hosts = [cpu_host(f"h{i}", cpu=1, running=(attempt(f"b{i}", cpu=1),)) for i in range(5)]
    plan = schedule(hosts, [task(f"p{i}", band=Band.PRODUCTION) for i in range(5)],
                    config=SchedulerConfig(max_preemptions_per_pass=2))
    assert len(plan.preemptions) == 2
    assert Counter(r.code for r in plan.reasons.values()) == {
        ReasonCode.PREEMPTING: 2, ReasonCode.NO_CAPACITY: 3}


# ---- gangs and slice topology ---------------------------------------------------------

def test_schedule_gang_asks_regions_with_a_free_whole_slice_best_first():
    hosts = tpu_slice("a1", "r1") + tpu_slice("b1", "r2") + tpu_slice("b2", "r2")
    plan = schedule(hosts, gang_tasks("j1"))
    (ask,) = plan.gang_requests
    assert ask.regions == ("r2", "r1")  # more free slices first
    assert ask.shape.whole_slices == 1 and ask.shape.hosts == 4
    assert len(ask.task_ids) == 4 and plan.assignments == []
    assert {r.code for r in plan.reasons.values()} == {ReasonCode.WAITING_FOR_GANG}


def test_schedule_one_slice_is_never_offered_to_two_gangs_in_a_pass():
    plan = schedule(tpu_slice("a1"), gang_tasks("j1") + gang_tasks("j2"))
    assert [g.gang_id for g in plan.gang_requests] == ["j1-g"]
    assert plan.reasons["j2-t0"].code is ReasonCode.NO_CAPACITY


def test_schedule_gang_evicts_several_small_jobs_to_free_a_large_slice():
    small = {j: [attempt(f"small{j}", chips=4, cpu=8, job=f"sj{j}")] for j in range(4)}
    hosts = tpu_slice("s1", running=small)
    plan = schedule(hosts, gang_tasks("big", band=Band.PRODUCTION))
    assert sorted(p.attempt_id for p in plan.preemptions) == [f"small{j}" for j in range(4)]
    assert plan.reasons["big-t0"].code is ReasonCode.PREEMPTING
    assert plan.gang_requests == []


def test_schedule_gang_prefers_a_free_slice_over_evicting():
    small = {0: [attempt("small0", chips=4, cpu=8)]}
    hosts = tpu_slice("busy", "r1", running=small) + tpu_slice("free", "r2")
    plan = schedule(hosts, gang_tasks("big", band=Band.PRODUCTION))
    assert plan.preemptions == []
    assert plan.gang_requests[0].regions == ("r2",)


def test_schedule_batch_gang_cannot_evict_batch_work():
    hosts = tpu_slice("s1", running={0: [attempt("small0", chips=4, cpu=8)]})
    plan = schedule(hosts, gang_tasks("g", band=Band.BATCH))
    assert plan.preemptions == [] and plan.reasons["g-t0"].code is ReasonCode.NO_CAPACITY


def test_schedule_small_tpu_tasks_pack_into_used_slices_first():
    used = tpu_slice("used", running={0: [attempt("x", chips=4, cpu=8)]})
    plan = schedule(used + tpu_slice("idle"), [task(f"t{i}", res=V5E_4) for i in range(3)]
                    + gang_tasks("g"))
    assert all(h.startswith("used-") for h in placed(plan).values())
    assert plan.gang_requests and plan.gang_requests[0].gang_id == "g-g"


def test_schedule_gang_in_flight_or_incomplete_is_waiting_for_gang():
    tasks = gang_tasks("j1") + gang_tasks("j2")[:3]
    plan = schedule(tpu_slice("s1") + tpu_slice("s2"), tasks, reserving_gangs={"j1-g"})
    assert plan.gang_requests == []
    assert plan.reasons["j1-t0"].code is ReasonCode.WAITING_FOR_GANG
    assert "3 of the 4" in plan.reasons["j2-t0"].message


def test_schedule_gang_constraint_matching_no_slice_is_named():
    tasks = [task(f"t{i}", res=V5E_16, gang="g", size=4, cons={"region": "r9"})
             for i in range(4)]
    plan = schedule(tpu_slice("s1"), tasks)
    assert plan.reasons["t0"].code is ReasonCode.CONSTRAINT_UNMATCHED
    assert "region == r9" in plan.reasons["t0"].message


def test_schedule_dry_run_answers_where_a_job_would_go():
    hosts = [cpu_host("h1", "r1", cpu=1), cpu_host("h2", "r2", cpu=8)]
    plan = schedule(hosts, [task(f"t{i}", res=Resources(cpu=2)) for i in range(2)])
    assert set(placed(plan).values()) == {"h2"}


def test_dry_run_says_whether_and_where_a_job_fits():
    hosts = [cpu_host("h1", cpu=2), *tpu_slice("s1", "r2")]
    fits = dry_run(hosts, [task("t0"), task("t1")] + gang_tasks("g"))
    assert fits["fits_now"] and fits["placements"] == {"t0": "h1", "t1": "h1"}
    assert fits["gang_regions"] == {"g-g": ["r2"]}
    nope = dry_run(hosts, [task("t0", res=Resources(cpu=3), cons={"zone": "r1-z"})])
    assert not nope["fits_now"]
    assert nope["pending"]["t0"]["code"] == "CONSTRAINT_UNMATCHED"
    assert "CONSTRAINT_UNMATCHED" in nope["summary"]


def test_schedule_accelerator_type_and_variant_are_constraint_keys():
    v6 = [HostView("v6-h0", "r1", "r1-b", Demand(32, 128 * GB, 4), slice_id="v6",
                   accelerator="v6e-4", accelerator_variant="v6e")]
    hosts = tpu_slice("s1") + v6
    plan = schedule(hosts, [
        task("t1", job="j1", res=V5E_4, cons={"accelerator": "v5litepod-16"}),
        task("t2", job="j2", res=V5E_4, cons={"accelerator_variant": {"ne": "v5litepod"}}),
    ])
    assert placed(plan)["t1"].startswith("s1-")
    assert plan.reasons["t2"].code is ReasonCode.CONSTRAINT_UNMATCHED


def test_schedule_eviction_over_passes_ends_with_the_gang_asking_for_the_slice():
    small = {j: [attempt(f"small{j}", chips=4, cpu=8, job=f"sj{j}")] for j in range(4)}
    gang = gang_tasks("big", band=Band.PRODUCTION)
    first = schedule(tpu_slice("s1", running=small), gang)
    evicted = {p.attempt_id for p in first.preemptions}
    assert len(evicted) == 4
    # Next pass: the victims are in their grace period; nothing more is evicted.
    stopping = {j: [RunningAttempt(a.attempt_id, a.task_id, a.job_id, a.user, a.band,
                                   a.demand, a.gang_id, terminating=True) for a in atts]
                for j, atts in small.items()}
    second = schedule(tpu_slice("s1", running=stopping), gang)
    assert second.preemptions == [] and second.reasons["big-t0"].code is ReasonCode.PREEMPTING
    # Then they are gone and the gang asks for the freed slice.
    third = schedule(tpu_slice("s1"), gang)
    assert [g.gang_id for g in third.gang_requests] == ["big-g"]


def test_schedule_single_host_tpu_task_breaks_the_smallest_idle_slice_not_a_gangs():
    """A v5litepod-4 task packs onto any v5litepod host. With only idle slices left it takes
    a host of the smallest one (a 1-host slice), so a v5litepod-16 slice stays whole for
    the gang waiting behind it. Before: it took the first idle host in fleet order, a host
    of the 4-host slice, and the gang found no whole slice (bench.daytrace default day:
    87.4% -> 88.5% of the upper bound with the routing fix, bench/RESULTS.md)."""
    single = HostView("one-h0", "r1", "r1-b", Demand(32, 128 * GB, 4), slice_id="one",
                      accelerator="v5litepod-4", accelerator_variant="v5litepod",
                      preemptible=True)
    hosts = [*tpu_slice("big"), single]  # the big slice comes first in fleet order
    pending = [task("solo", "solo", band=Band.INTERACTIVE, res=V5E_4),
               *gang_tasks("gang")]
    plan = schedule(hosts, pending)
    assert placed(plan) == {"solo": "one-h0"}
    assert [r.gang_id for r in plan.gang_requests] == ["gang-g"]
    assert set(plan.gang_requests[0].hosts) == {f"big-h{j}" for j in range(4)}


def test_schedule_a_gang_takes_its_fair_share_turn_among_single_tasks():
    """Gangs are not a phase of their own: in one band a gang and a single task are served
    in the users' fair-share order, so whoever uses less gets the last slice. Running the
    gangs before the singles (or after) would give it to the same side both times."""
    pending = [task("solo", "solo", user="bob", res=V5E_4), *gang_tasks("gang")]

    def with_running(user):  # `user` already runs work in the band: the other goes first
        return [*tpu_slice("big"), cpu_host("c1", cpu=8, running=(attempt("x", user=user),))]

    alice_busy = schedule(with_running("alice"), pending)
    assert set(placed(alice_busy)) == {"solo"} and alice_busy.gang_requests == []
    assert alice_busy.reasons["gang-t0"].code is ReasonCode.NO_CAPACITY
    bob_busy = schedule(with_running("bob"), pending)
    assert placed(bob_busy) == {} and [g.gang_id for g in bob_busy.gang_requests] == ["gang-g"]
    assert bob_busy.reasons["solo"].code is ReasonCode.NO_CAPACITY
