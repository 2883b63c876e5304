"""The live figures kernel (controller/live_figures.py) and its feed from the job kernel's records
(controller/figures_feed.py): events in at a hand-moved `now`, figures out. No sockets."""

from __future__ import annotations

import pytest

from iris.controller import live_figures as lf
from iris.controller.figures_feed import figure_events, fleet_sample
from iris.controller.jobs import events as ev
from iris.controller.workers import WorkerInfo
from tests.controller.test_job_support import T0, Harness, spec


def host(accel="v5litepod-16", region="us-central2", slice_id="s1", units=4.0, busy=0.0):
    return lf.HostSample(accel, region, slice_id, units, busy, busy == 0)


def sample(*hosts, wanted=()):
    return lf.Sample(tuple(hosts), frozenset(wanted))


# ------------------------------------------------------------------------- utilization


def test_utilization_is_busy_over_up_per_accelerator_and_region():
    s = lf.FiguresState()
    lf.handle(s, sample(host(busy=4), host(busy=0), host(region="europe-west4", busy=2),
                        host("cpu", "us-central2", "w9", units=8, busy=2)), T0)
    pools = {(p["accelerator"], p["region"]): p for p in lf.summary(s, T0)["pools"]}
    assert pools[("v5litepod-16", "us-central2")] | {} == {
        "accelerator": "v5litepod-16", "region": "us-central2", "busy": 4.0, "up": 8.0,
        "utilization": 0.5}
    assert pools[("v5litepod-16", "europe-west4")]["utilization"] == 0.5
    assert pools[("cpu", "us-central2")]["utilization"] == 0.25


def test_busy_is_capped_at_what_the_host_has():
    s = lf.FiguresState()
    lf.handle(s, sample(host("cpu", "r", "w1", units=2, busy=3)), T0)
    assert lf.summary(s, T0)["pools"][0]["utilization"] == 1.0


def test_samples_are_due_every_10_s_and_the_ring_keeps_24_h():
    s = lf.FiguresState()
    assert lf.due(s, T0)
    lf.handle(s, sample(host(busy=4)), T0)
    assert not lf.due(s, T0 + 9.9) and lf.due(s, T0 + 10.0)
    for i in range(1, 9000):  # more than a day of points: the oldest fall out
        lf.handle(s, sample(host(busy=4 if i % 2 else 0)), T0 + 10.0 * i)
    assert len(s.points) == 8641
    assert s.points[0][0] == T0 + 10.0 * (9000 - 8641)


def test_series_averages_down_to_max_points_and_keeps_the_window_asked():
    s = lf.FiguresState()
    for i in range(720):  # two hours, busy 4 of 8 then 8 of 8 alternately
        lf.handle(s, sample(host(busy=4), host(slice_id="s2", busy=4 if i % 2 else 0)),
                  T0 + 10.0 * i)
    now = T0 + 7195.0
    hour = lf.series(s, now, hours=1, max_points=180)
    points = hour["pools"][0]["points"]
    assert len(points) == 180  # 360 points in the hour, two per point shown
    assert all(p[0] >= now - 3600 for p in points)
    assert all(p[1] == 6.0 and p[2] == 8.0 and p[3] == 0.75 for p in points)
    assert len(lf.series(s, now, hours=24)["pools"][0]["points"]) == 360


# ------------------------------------------------------------------------- fragmentation


def test_no_waiting_gang_means_no_fragmentation():
    s = lf.FiguresState()
    lf.handle(s, sample(host(busy=2), host(busy=0)), T0)
    assert lf.summary(s, T0)["fragmented_chips"] == 0


def test_free_chips_on_partly_busy_slices_and_unwanted_types_are_fragmented():
    s = lf.FiguresState()
    lf.handle(s, sample(
        host(slice_id="a", busy=4), host(slice_id="a", busy=0),         # partly busy: 4 free
        host(slice_id="b"), host(slice_id="b"),                          # whole idle, wanted
        host("v5litepod-32", slice_id="c"), host("v5litepod-32", slice_id="c"),  # unwanted: 8
        host("cpu", slice_id="w7", units=16),                            # cores never count
        wanted={"v5litepod-16"}), T0)
    assert lf.summary(s, T0)["fragmented_chips"] == 12


# ------------------------------------------------------------------------- queue, preemptions


def test_queue_time_p50_p90_by_band_over_the_window():
    s = lf.FiguresState()
    lf.handle(s, lf.Queued("batch", 10_000.0), T0)  # older than 24 h at the end: dropped
    for i in range(1, 11):
        lf.handle(s, lf.Queued("batch", 60.0 * i), T0 + 86_000 + i)
    lf.handle(s, lf.Queued("production", 2.0), T0 + 86_000)
    q = lf.summary(s, T0 + 86_500)["queue"]
    assert q["batch"] == {"p50_s": 300.0, "p90_s": 540.0, "count": 10, "sum_s": 3300.0}
    assert q["production"]["p50_s"] == q["production"]["p90_s"] == 2.0
    assert q["interactive"] == {"p50_s": None, "p90_s": None, "count": 0, "sum_s": 0}


def test_queue_times_read_twice_within_an_interval_see_a_wait_added_between():
    s = lf.FiguresState()
    lf.handle(s, lf.Queued("batch", 10.0), T0)
    assert lf.summary(s, T0 + 1)["queue"]["batch"]["count"] == 1
    lf.handle(s, lf.Queued("batch", 30.0), T0 + 2)
    assert lf.summary(s, T0 + 3)["queue"]["batch"] == {"p50_s": 10.0, "p90_s": 30.0,
                                                        "count": 2, "sum_s": 40.0}


def test_preemptions_count_evictions_and_lost_machines_gang_restarts_only_waste():
    s = lf.FiguresState()
    lf.handle(s, lf.WorkLost("evicted", 4, 1800.0), T0)
    lf.handle(s, lf.WorkLost("machine_lost", 4, 3600.0), T0)
    lf.handle(s, lf.WorkLost("gang_restart", 4, 3600.0), T0)
    lf.handle(s, lf.WorkLost("evicted", 0, 3600.0), T0)  # a CPU task: no chips wasted
    got = lf.summary(s, T0)
    assert got["preemptions"] == {"evicted": 2, "machine_lost": 1}
    assert got["wasted_chip_hours"] == 10.0


def test_unknown_event_is_refused_and_changes_nothing():
    s = lf.FiguresState()
    with pytest.raises(TypeError):
        lf.handle(s, "tick", T0)  # type: ignore[arg-type]
    assert not s.points and s.wasted_chip_s == 0


# ------------------------------------------------------------------------- the feed


def _events(h: Harness, event) -> list:
    effects = h.send(event)
    return [e for p in effects if isinstance(p, ev.Persist) for e in figure_events(p, h.state)]


def test_first_attempt_waits_from_submit_and_a_retry_from_its_eviction():
    h = Harness()
    job = h.submit(spec("train", priority="batch", resources={"tpu": "v5litepod-4"}))
    h.advance(120)
    assert _events(h, ev.Assign(h.eid(), (ev.Placement(job, 0, "w1", "a1"),))) == [
        lf.Queued("batch", 120.0)]
    h.send(ev.AttemptRunning(h.eid(), "a1"))
    h.advance(3600)
    lost = _events(h, ev.Preempted(h.eid(), "a1", "preempted for /bob/prod"))
    assert lost == [lf.WorkLost("evicted", 4, 3600.0)]
    h.advance(30)
    assert _events(h, ev.Assign(h.eid(), (ev.Placement(job, 0, "w2", "a2"),))) == [
        lf.Queued("batch", 30.0)]


def test_a_lost_worker_costs_a_preemption_and_its_run():
    h = Harness()
    job = h.submit(spec("eval"))
    a = h.run(job, worker="w1")
    h.advance(600)
    assert _events(h, ev.WorkerLost(h.eid(), "w1", "no heartbeat")) == [
        lf.WorkLost("machine_lost", 0, 600.0)]
    assert h.state.attempts[a].state.value == "worker_failed"


def test_an_evicted_gang_member_restarts_its_siblings_whose_runs_are_waste():
    h = Harness()
    job = h.submit(spec("big", resources={"tpu": "v5litepod-16"}))
    placements = tuple(ev.Placement(job, i, f"w{i}", f"g{i}") for i in range(4))
    h.send(ev.Assign(h.eid(), placements))
    for i in range(4):
        h.send(ev.AttemptRunning(h.eid(), f"g{i}"))
    h.advance(1000)
    got = _events(h, ev.Preempted(h.eid(), "g2"))
    assert sorted(e.cause for e in got) == ["evicted", "gang_restart", "gang_restart",
                                             "gang_restart"]
    assert {(e.chips, e.run_s) for e in got} == {(4, 1000.0)}


def test_fleet_sample_counts_chips_on_tpu_hosts_and_cores_on_cpu_hosts():
    h = Harness()
    tpu = h.submit(spec("t", resources={"tpu": "v5litepod-4", "cpu": 2}))
    cpu = h.submit(spec("c", resources={"cpu": 3}))
    h.run(tpu, worker="tpu-1")
    h.run(cpu, worker="cpu-1")
    h.submit(spec("g", resources={"tpu": "v5litepod-16"}))  # a gang waits
    workers = [
        WorkerInfo("tpu-1", "tcp://a", "us-central2", {"accelerator_type": "v5litepod-4",
                   "slice_id": "s1"}, 8, 0, 4, T0, T0),
        WorkerInfo("cpu-1", "tcp://b", "us-central2", {}, 8, 0, 0, T0, T0),
    ]
    got = fleet_sample(h.state, workers)
    assert got.wanted == frozenset({"v5litepod-16"})
    assert [(x.accelerator, x.units, x.busy, x.idle) for x in got.hosts] == [
        ("v5litepod-4", 4.0, 4.0, False), ("cpu", 8.0, 3.0, False)]
