"""The day-trace simulator (bench.daytrace): tiny traces through the real kernels, checked
for what a user would trust in its figures. Seconds, no sockets, a fake clock."""

from __future__ import annotations

import json

import pytest

from bench import daytrace
from bench._daytrace import figures, world
from bench._daytrace.trace import CHIPS_PER_HOST, Capacity, Job, Trace, dump, generate, load
from iris.base.errors import InvalidRequestError

HOUR = 3600.0


def _capacity_chip_hours(run: world.Run) -> float:
    return sum(s["capacity_chips"] for s in run.samples) * world.SAMPLE_S / HOUR


@pytest.fixture(scope="module")
def tiny_day():
    day = generate(seed=3, n_regions=2, hours=3, fleet_hosts=48)
    return day, {mode: world.run(day, mode, seed=3) for mode in ("global", "per_region")}


def test_daytrace_tiny_day_books_no_host_twice_and_places_every_gang_whole(tiny_day):
    _, runs = tiny_day
    for run in runs.values():
        assert run.violations == []
        assert run.work.starts > 0


def test_daytrace_useful_work_never_exceeds_the_capacity_offered(tiny_day):
    day, runs = tiny_day
    bound = figures.upper_bound(day)
    for run in runs.values():
        useful = sum(run.work.useful.values()) / HOUR
        assert 0 < useful <= bound["chip_hours"] <= bound["capacity_chip_hours"] + 1e-6
        assert max(s["busy_chips"] for s in run.samples) <= max(
            s["capacity_chips"] for s in run.samples)


def _one_region_has_capacity(hours: float = 3.0) -> Trace:
    """Every user camps in region a; only region b ever has TPU hosts."""
    capacity = [Capacity(0, "a", 0), Capacity(0, "b", 32)]
    jobs = [Job(0, f"j{i}", "alice", "a", "batch", "v5litepod-16", 1, 8, 2 * HOUR, 600)
            for i in range(6)]
    return Trace(("a", "b"), hours, capacity, jobs, None)


def test_daytrace_global_beats_per_region_when_capacity_is_where_users_are_not():
    day = _one_region_has_capacity()
    per_region = world.run(day, "per_region")
    global_ = world.run(day, "global")
    assert sum(per_region.work.useful.values()) == 0  # region a never had a host
    # 6 gangs x 16 chips x 2 h fit in b's 32 hosts once booted: nearly all of it is done.
    assert sum(global_.work.useful.values()) / HOUR > 0.8 * 6 * 16 * 2
    assert global_.violations == []


def test_daytrace_preemption_wave_wastes_only_the_work_since_the_last_checkpoint():
    ckpt = 600.0
    day = Trace(("a",), 2.0, [Capacity(0, "a", 4), Capacity(3000, "a", 0)],
                [Job(0, "j1", "alice", "a", "batch", "v5litepod-16", 1, 8, 4 * HOUR, ckpt)],
                None)
    run = world.run(day, "global")
    job = run.jobs[0]
    ran = 3000 - job.first_start  # the wave at t=3000 s takes the only slice back
    lost = ran % ckpt
    chips = 4 * CHIPS_PER_HOST
    assert run.work.wasted == pytest.approx(lost * chips)
    assert run.work.useful["batch"] == pytest.approx((ran - lost) * chips)
    assert run.work.preemptions == 4  # every task of the gang, stopped together
    assert run.violations == []


def test_daytrace_trace_round_trips_through_json_lines(tmp_path):
    day = generate(seed=5, n_regions=3, hours=2, fleet_hosts=24)
    again = load(list(dump(day)))
    assert again.regions == day.regions and again.hours == day.hours
    assert again.capacity == day.capacity and again.jobs == day.jobs


@pytest.mark.parametrize("line, says", [
    ('{"kind": "job", "t": 0, "id": "x", "user": "u", "region": "r", "band": "urgent", '
     '"accelerator": "cpu", "duration_s": 60}', "line 2: priority: unknown band"),
    ('{"kind": "job", "t": 0, "id": "x", "user": "u", "region": "r", "band": "batch", '
     '"accelerator": "v9-16", "duration_s": 60}', "line 2: tpu: unknown accelerator"),
    ('{"kind": "capacity", "t": 0, "region": "nowhere", "hosts": 4}', "region 'nowhere'"),
    ('{"kind": "capacity", "t": -5, "region": "r", "hosts": 4}', "line 2: capacity: t"),
    ("not json", "line 2"),
])
def test_daytrace_bad_trace_line_is_refused_naming_the_line(line, says):
    meta = json.dumps({"kind": "meta", "regions": ["r"], "hours": 1})
    with pytest.raises(InvalidRequestError, match=says):
        load([meta, line], "day.jsonl")


def test_daytrace_cli_replays_a_saved_trace_and_ends_with_one_json_line(tmp_path, capsys):
    path = tmp_path / "day.jsonl"
    day = generate(seed=2, n_regions=2, hours=1, fleet_hosts=16)
    path.write_text("\n".join(dump(day)) + "\n")
    result = daytrace.main(["--trace", str(path)])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == json.loads(json.dumps(result))
    assert result["global"]["violations"] == result["per_region"]["violations"] == 0
    assert result["upper_bound_chip_hours"] >= result["global"]["useful_chip_hours"]


def test_daytrace_diagnose_accounts_for_every_offered_chip_hour(tmp_path, capsys):
    """--diagnose splits the capacity offered into busy, idle, booting and free quota (the
    parts add up to what the trace offered) and the wasted work by cause (adding up to the
    run's wasted figure); both printed and in the JSON."""
    path = tmp_path / "day.jsonl"
    day = generate(seed=3, n_regions=2, hours=3, fleet_hosts=48)
    path.write_text("\n".join(dump(day)) + "\n")
    result = daytrace.main(["--trace", str(path), "--diagnose"])
    out = capsys.readouterr().out
    assert "where the offered capacity went (global" in out
    for mode in ("global", "per_region"):
        d = result["diagnosis"][mode]
        parts = sum(d[k] for k in ("busy", "idle_ready", "booting", "free_no_fit",
                                   "free_held_back", "free_transient"))
        assert parts == pytest.approx(d["offered"], abs=1.0)
        assert d["offered"] == pytest.approx(result["capacity_chip_hours"], abs=1.0)
        assert sum(d["wasted"].values()) == pytest.approx(
            result[mode]["wasted_chip_hours"], abs=1.0)
        assert d["busy"] >= result[mode]["useful_chip_hours"] - 1.0


def test_daytrace_boot_aware_bound_counts_capacity_from_boot_on_and_no_run_beats_it(tiny_day):
    """Capacity that appears at t cannot run work before t + boot (3 min): the tighter
    bound charges exactly that, and neither mode of a real run ever exceeds it."""
    day = Trace(("a",), 3.0, [Capacity(0, "a", 0), Capacity(3600, "a", 4)],
                [Job(0, "j1", "alice", "a", "batch", "v5litepod-16", 1, 8, 10 * HOUR, 600)],
                None)
    chips = 4 * CHIPS_PER_HOST
    loose = figures.upper_bound(day)["chip_hours"]
    tight = figures.booted_bound(day, world.BOOT_S, world.TICK_S)["chip_hours"]
    assert loose == pytest.approx(chips * 2.0)
    assert tight == pytest.approx(chips * (2.0 - world.BOOT_S / HOUR))
    run = world.run(day, "global")
    assert sum(run.work.useful.values()) / HOUR <= tight + 1e-6
    day, runs = tiny_day
    tight = figures.booted_bound(day, world.BOOT_S, world.TICK_S)["chip_hours"]
    assert tight <= figures.upper_bound(day)["chip_hours"]
    for run in runs.values():
        assert sum(run.work.useful.values()) / HOUR <= tight + 1e-6
