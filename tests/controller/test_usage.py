"""What attempts use, as the controller keeps it: series bounded and downsampled, totals and
ports stored with the attempt (surviving a restart), fenced by worker, pruned with the job;
the summary's times, endings and totals; finding a task to look into, and refusing what
cannot be looked into. Real SQLite, a fake clock, no sockets."""

from __future__ import annotations

import sqlite3

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import InvalidRequestError, NotFoundError, PermissionDeniedError
from iris.controller.inspect import locate, summary
from iris.controller.jobs.store import SCHEMA_VERSION, JobStore
from iris.controller.jobs.usage_rows import MAX_NOTES
from iris.controller.service import ControllerConfig, ControllerService
from iris.controller.usage import MAX_POINTS, Series, halve
from iris.wire import control
from iris.wire.states import DB_NAME

W = {"cpu": "4", "memory": str(2**33), "region": "r1"}


def _service(tmp_path, clock) -> ControllerService:
    return ControllerService(ControllerConfig(state_dir=tmp_path, stop_grace_s=2.0),
                             "tcp://127.0.0.1:1", clock)


def _submit(svc, name: str, resources: dict | None = None, **extra) -> str:
    return svc.submit({"name": f"/alice/{name}", "user": "alice",
                       "resources": resources or {"cpu": 1, "memory": 1 << 30},
                       "entrypoint": {"kind": "command", "argv": ["true"]}, **extra})["job_id"]


def _running(svc, clock, name: str, resources: dict | None = None,
             **extra) -> tuple[str, str]:
    """A job whose one task runs on w1 (its named ports at 8123, 8124, ...)."""
    job = _submit(svc, name, resources, **extra)
    svc.tick()
    attempt = svc.state.tasks[(job, 0)].attempt_id
    svc.take_commands()
    ports = {p: 8123 + i for i, p in enumerate((resources or {}).get("ports", ()))}
    svc.report("w1", [{"attempt_id": attempt, "status": "running",
                       **({"ports": ports} if ports else {})}])
    return job, attempt


def _sample(attempt: str, at: float, cpu: float, rss: int) -> dict:
    return {"attempt_id": attempt, "at": at, "cpu_s": cpu, "rss_bytes": rss}


@pytest.fixture
def svc(tmp_path):
    clock = FakeClock()
    service = _service(tmp_path, clock)
    service.register_worker("w1", "tcp://127.0.0.1:2", W, [])
    service.clock_ = clock
    yield service
    service.close()


def test_readings_make_a_series_and_the_end_its_totals_kept_across_a_restart(svc, tmp_path):
    clock = svc.clock_
    job, attempt = _running(svc, clock, "train", resources={"cpu": 2, "memory": 1 << 30,
                                                            "ports": ["http"]})
    t = clock.wall()
    for i in range(5):
        svc.report("w1", [], None, [attempt], [_sample(attempt, t + 2 * i, 1.5 * i, (i + 1) << 20)])
    running = summary(svc, job)["tasks"][0]
    assert [p["rss_bytes"] for p in running["series"]] == [(i + 1) << 20 for i in range(5)]
    assert running["series"][-1]["cores"] == pytest.approx(0.75)  # 1.5 CPU-s per 2 s
    assert running["attempts"][0]["cpu_s"] == 6.0  # so far, from the readings
    clock.advance(10)
    totals = {"cpu_s": 7.25, "peak_rss_bytes": 9 << 20, "peak_memory_bytes": 10 << 20,
              "disk_bytes": 4096, "oom_killed": False}
    svc.report("w1", [{"attempt_id": attempt, "status": "exited", "exit_code": 0,
                       "usage": totals}])
    svc.close()
    restarted = _service(tmp_path, clock)
    try:
        got = summary(restarted, job)
        row = got["tasks"][0]["attempts"][0]
        assert row["cpu_s"] == 7.25 and row["peak_rss_bytes"] == 9 << 20 and row["usage_final"]
        assert row["peak_of_request"] == pytest.approx((9 << 20) / (1 << 30), abs=1e-3)
        assert row["ended"] == "exit 0"
        assert len(got["tasks"][0]["series"]) == 5  # written with the totals
        assert got["totals"]["cpu_s"] == 7.25
        stored = restarted.store.usage_of(job)[attempt]
        assert stored.ports == {"http": 8123}
    finally:
        restarted.close()


def test_readings_of_an_attempt_from_another_worker_are_ignored(svc):
    job, attempt = _running(svc, svc.clock_, "fenced")
    svc.register_worker("w2", "tcp://127.0.0.1:3", W, [])
    svc.report("w2", [], None, [], [_sample(attempt, svc.clock_.wall(), 99.0, 1 << 40)])
    svc.report("w2", [{"attempt_id": attempt, "status": "exited", "exit_code": 0,
                       "usage": {"cpu_s": 99.0, "peak_rss_bytes": 1 << 40}}])
    got = summary(svc, job)["tasks"][0]
    assert got["series"] == [] and got["attempts"][0]["cpu_s"] is None
    assert svc.store.usage_of(job) == {}


def test_a_malformed_reading_refuses_the_report_whole_and_changes_nothing(svc):
    job, attempt = _running(svc, svc.clock_, "bad")
    with pytest.raises(InvalidRequestError, match=r"usage\[0\].rss_bytes"):
        svc.report("w1", [{"attempt_id": attempt, "status": "exited", "exit_code": 0}],
                   None, [], [{**_sample(attempt, 1.0, 1.0, 1), "rss_bytes": "lots"}])
    assert svc.state.attempts[attempt].state.value == "running"  # the exit was not applied


def test_a_series_stays_bounded_keeping_its_span_and_its_peak():
    series = Series("/alice/j")
    for i in range(10 * MAX_POINTS):
        rss = 500 << 20 if i == 777 else 1 << 20
        series.add(control.UsageSample("a", float(i), float(i), rss))
    assert len(series.points) <= MAX_POINTS
    assert series.points[0][0] < 10 * MAX_POINTS / 50 and \
        series.points[-1][0] == 10 * MAX_POINTS - 1
    gaps = {round(b[0] - a[0]) for a, b in zip(series.points[:-2], series.points[1:-1],
                                               strict=True)}
    assert len(gaps) == 1  # one resolution over the whole run (the last point still fills)
    assert max(p[2] for p in series.points) == 500 << 20
    assert [p[1] for p in series.points] == sorted(p[1] for p in series.points)
    series.add(control.UsageSample("a", 5.0, 5.0, 1))  # older than the last: dropped
    assert series.points[-1][0] == 10 * MAX_POINTS - 1
    assert halve([(1.0, 1.0, 5, None, None, 0.5), (2.0, 2.0, 3, 7, 10, None)]) == \
        [(2.0, 2.0, 5, 7, 10, 0.5)]


def test_a_retried_attempt_says_why_and_an_oom_kill_is_named(svc):
    clock = svc.clock_
    job, first = _running(svc, clock, "oom", max_retries_failure=1)
    clock.advance(5)
    svc.report("w1", [{"attempt_id": first, "status": "exited", "exit_code": 137,
                       "error": "killed by SIGKILL: out of memory (limit 1 GiB)",
                       "usage": {"cpu_s": 1.0, "peak_rss_bytes": 1 << 30, "oom_killed": True}}])
    svc.tick()
    second = svc.state.tasks[(job, 0)].attempt_id
    assert second != first
    clock.advance(3)
    svc.report("w1", [{"attempt_id": second, "status": "running"}])
    clock.advance(4)
    svc.report("w1", [{"attempt_id": second, "status": "exited", "exit_code": 143,
                       "error": "killed by SIGTERM"}])
    got = summary(svc, job)
    one, two = got["tasks"][0]["attempts"]
    assert one["ended"] == "killed for memory (OOM in its cgroup)" and one["killed_for_memory"]
    assert one["retried_because"].startswith("killed by SIGKILL: out of memory")
    assert one["peak_of_request"] == 1.0
    assert two["signal"] == "SIGTERM" and two["ended"].startswith("killed by SIGTERM")
    assert two["queue_s"] == pytest.approx(0.0) and two["run_s"] == pytest.approx(4.0)
    assert got["totals"] == {**got["totals"], "attempts": 2, "retries": 1,
                             "killed_for_memory": 1}


def test_chip_hours_count_the_chips_of_a_tpu_attempt(tmp_path):
    clock = FakeClock()
    svc = _service(tmp_path, clock)
    try:
        svc.register_worker("tpu", "tcp://127.0.0.1:2", {**W, "accelerator_type": "v5litepod-4",
                                                         "accelerator_count": "4"}, [])
        job = _submit(svc, "tpu", resources={"cpu": 1, "tpu": "v5litepod-4"})
        svc.tick()
        attempt = svc.state.tasks[(job, 0)].attempt_id
        svc.report("tpu", [{"attempt_id": attempt, "status": "running"}])
        clock.advance(1800)
        svc.report("tpu", [{"attempt_id": attempt, "status": "exited", "exit_code": 0}])
        row = summary(svc, job)["tasks"][0]["attempts"][0]
        assert row["chips"] == 4 and row["chip_hours"] == pytest.approx(2.0)
    finally:
        svc.close()


def test_looking_into_a_task_refuses_what_cannot_be_done_and_changes_nothing(svc):
    job, attempt = _running(svc, svc.clock_, "look", resources={"cpu": 1, "ports": ["http"]})
    pending = _submit(svc, "waits", resources={"cpu": 4})
    ask = {"job_id": job, "task_index": 0}
    with pytest.raises(NotFoundError, match="no job /alice/nope"):
        locate(svc, {**ask, "job_id": "/alice/nope", "kind": "stack"})
    with pytest.raises(NotFoundError, match="has no task 3"):
        locate(svc, {**ask, "task_index": 3, "kind": "stack"})
    with pytest.raises(InvalidRequestError, match="is pending: nothing of it runs"):
        locate(svc, {"job_id": pending, "kind": "profile"})
    with pytest.raises(InvalidRequestError, match="asked for no port named 'tb'"):
        locate(svc, {**ask, "kind": "url", "port": "tb"})
    with pytest.raises(PermissionDeniedError, match=r"only its owner \(alice\)"):
        locate(svc, {**ask, "kind": "exec", "user": "mallory", "argv": ["id"]})
    assert svc.store.notes(job) == []  # a refused exec is not recorded
    target = locate(svc, {**ask, "kind": "url", "port": "http"})
    assert target["port"] == 8123 and target["attempt_id"] == attempt
    locate(svc, {**ask, "kind": "exec", "user": "alice", "argv": ["python", "-V"]})
    locate(svc, {**ask, "kind": "exec", "user": "root", "operator": True, "argv": ["ls"]})
    notes = summary(svc, job)["events"]
    assert [(n["user"], n["operator"], n["command"]) for n in notes] == [
        ("alice", False, "python -V"), ("root", True, "ls")]
    svc.report("w1", [{"attempt_id": attempt, "status": "exited", "exit_code": 0}])
    with pytest.raises(InvalidRequestError, match="is succeeded: nothing of it runs"):
        locate(svc, {**ask, "kind": "stack"})


def test_usage_and_notes_are_pruned_with_their_job_and_notes_are_bounded(svc):
    clock = svc.clock_
    job, attempt = _running(svc, clock, "old")
    for i in range(MAX_NOTES + 10):
        svc.store.add_note(job, float(i), "exec", {"user": "alice", "command": str(i)})
    assert len(svc.store.notes(job)) == MAX_NOTES
    assert svc.store.notes(job)[-1]["command"] == str(MAX_NOTES + 9)
    svc.report("w1", [{"attempt_id": attempt, "status": "exited", "exit_code": 0,
                       "usage": {"cpu_s": 1.0, "peak_rss_bytes": 1}}])
    assert attempt in svc.store.usage_of(job)
    clock.advance(svc.config.retention_s + 10)
    svc.prune()
    assert svc.store.usage_of(job) == {} and svc.store.notes(job) == []


def test_a_version_2_job_store_gains_the_usage_tables_by_migration(tmp_path):
    with JobStore(tmp_path) as store:
        store._db.execute("DROP TABLE attempt_usage")
        store._db.execute("DROP TABLE job_notes")
        store._db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with JobStore(tmp_path) as store:
        assert store.migrated_from == 2
        store.add_note("/alice/x", 1.0, "exec", {"user": "alice"})
        assert store.notes("/alice/x") == [{"at": 1.0, "kind": "exec", "user": "alice"}]
    db = sqlite3.connect(tmp_path / DB_NAME)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] \
        == str(SCHEMA_VERSION) == "4"
    db.close()


def test_a_wide_job_carries_the_series_of_its_first_tasks_and_every_tasks_totals(svc):
    from iris.controller.usage_view import SERIES_TASKS

    job = _submit(svc, "wide", resources={"cpu": 0.01}, replicas=SERIES_TASKS + 2)
    svc.tick()
    svc.take_commands()
    at = svc.clock_.wall()
    for index in (0, SERIES_TASKS + 1):
        attempt = svc.state.tasks[(job, index)].attempt_id
        svc.report("w1", [{"attempt_id": attempt, "status": "running"}])
        svc.report("w1", [], None, [], [_sample(attempt, at, 2.0, 5 << 20)])
    got = summary(svc, job)
    first, last = got["tasks"][0], got["tasks"][SERIES_TASKS + 1]
    assert len(first["series"]) == 1 and last["series"] == []
    assert last["attempts"][0]["cpu_s"] == 2.0  # its totals so far, all the same
    assert got["series_tasks"] == SERIES_TASKS
