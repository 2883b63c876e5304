"""The report interval the controller asks of its workers grows with the fleet and when the
controller falls behind, and never past what the lease allows; a batch of reports is one
turn with one answer each. A real ControllerService (SQLite in a temp dir, FakeClock)."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.controller.report_check import check_report
from iris.controller.service import ControllerConfig, ControllerService
from iris.controller.workers import REPORTS_PER_S, report_interval_s
from iris.wire import fencing
from iris.worker.actor import HEARTBEAT_S, report_interval

ATTRS = {"cpu": "4", "memory": str(2**33)}


@pytest.fixture
def svc(tmp_path):
    clock = FakeClock()
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1", clock)
    yield service, clock
    service.close()


def test_interval_is_one_second_for_a_small_fleet_and_grows_to_the_lease_bound():
    assert report_interval_s(10, behind=False) == 1.0
    assert report_interval_s(int(REPORTS_PER_S * 2), behind=False) == 2.0
    assert report_interval_s(10_000, behind=False) == fencing.REPORT_INTERVAL_MAX_S
    assert report_interval_s(1_000_000, behind=False) == fencing.REPORT_INTERVAL_MAX_S
    assert report_interval_s(10, behind=True) == fencing.REPORT_INTERVAL_MAX_S
    # the lease outlasts a blip plus the longest interval (wire/fencing.py)
    assert fencing.BLIP_S + fencing.REPORT_INTERVAL_MAX_S <= fencing.FENCE_AFTER_S


@pytest.mark.parametrize("asked, used", [
    (2.5, 2.5), (0.01, HEARTBEAT_S), (60.0, fencing.REPORT_INTERVAL_MAX_S), (None, HEARTBEAT_S),
    ("3", HEARTBEAT_S), (float("nan"), HEARTBEAT_S), (True, HEARTBEAT_S)])
def test_worker_keeps_the_interval_it_is_told_within_the_lease_bound(asked, used):
    assert report_interval(asked) == used


def test_report_answers_carry_the_interval_and_a_late_tick_stretches_it(svc):
    service, clock = svc
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    service.tick()
    assert service.report("w1", [])["interval_s"] == 1.0
    clock.advance(0.05)
    service.tick()
    assert service.report("w1", [])["interval_s"] == 1.0
    clock.advance(2.0)  # the controller's own turn came 2 s late: it is behind
    service.tick()
    assert service.report("w1", [])["interval_s"] == fencing.REPORT_INTERVAL_MAX_S
    for _ in range(int(11 / 0.05)):  # on time again for longer than the hold
        clock.advance(0.05)
        service.tick()
    assert service.report("w1", [])["interval_s"] == 1.0


def test_a_batch_of_reports_answers_each_in_order(svc):
    service, clock = svc
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    service.register_worker("w2", "tcp://127.0.0.1:3", ATTRS, [])
    job = service.submit({"name": "/u/a", "user": "u", "resources": {"cpu": 1},
                          "entrypoint": {"kind": "command", "argv": ["true"]}})["job_id"]
    [start] = service.take_commands()
    attempt, worker = start.body["attempt_id"], start.worker_id
    other = "w2" if worker == "w1" else "w1"
    clock.advance(5.0)
    answers = service.reports([
        check_report(other, [], {}, []),
        check_report("ghost", [], {}, []),
        check_report(worker, [{"attempt_id": attempt, "status": "exited", "exit_code": 0}],
                     {}, []),
    ])
    assert [a["reregister"] for a in answers] == [False, True, False]
    assert answers[2]["acked"] == [attempt]
    assert service.job_state(job) == "succeeded"
    assert service.take_commands() == []  # an attempt that just exited needs no repair
    heard = {w["worker_id"]: w["last_heard_s_ago"] for w in service.list_workers()}
    assert heard == {"w1": 0.0, "w2": 0.0}


def test_refused_registrations_are_told_to_come_back_spread_over_the_admission_rate(svc):
    from iris.base.errors import OverloadedError
    from iris.controller.service import REGISTRATIONS_PER_S

    service, clock = svc
    t0, waits = clock.monotonic(), []
    for i in range(REGISTRATIONS_PER_S + 1000):  # a storm, all at one instant
        try:
            service.register_worker(f"w{i}", f"tcp://127.0.0.1:{2000 + i}", ATTRS, [])
        except OverloadedError as exc:
            waits.append(exc.retry_after_s)
    assert len(waits) == 1000
    # each refused worker has its own slot: the k-th comes back after ~k / rate seconds, so
    # the retries arrive no faster than they can be admitted (not all within a second)
    assert max(waits) >= 1000 / REGISTRATIONS_PER_S
    assert sum(1 for w in waits if w < 1.0) <= REGISTRATIONS_PER_S * 1.1
    admitted = REGISTRATIONS_PER_S
    for wait, i in sorted((w, i) for i, w in enumerate(waits)):  # each at its time
        if clock.monotonic() < t0 + wait:
            clock.advance(t0 + wait - clock.monotonic())
        try:
            service.register_worker(f"w{REGISTRATIONS_PER_S + i}",
                                    f"tcp://127.0.0.1:{2000 + REGISTRATIONS_PER_S + i}",
                                    ATTRS, [])
            admitted += 1
        except OverloadedError:
            pass
    assert admitted >= REGISTRATIONS_PER_S + 900  # nearly all got in at their slot


def _row(service, worker_id: str) -> dict:
    return next(w for w in service.list_workers() if w["worker_id"] == worker_id)


def test_a_worker_is_late_only_once_it_missed_the_interval_it_was_asked_for_by_the_margin(svc):
    service, clock = svc
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    service.tick()
    # Before its first answer it may still use any interval it was told before: the longest.
    assert _row(service, "w1")["late_after_s"] == fencing.late_after_s(
        fencing.REPORT_INTERVAL_MAX_S)
    asked = service.report("w1", [])["interval_s"]  # 1 s for a fleet of one
    rule = fencing.late_after_s(asked)
    assert rule == 2 * asked + 1.0 and _row(service, "w1")["report_interval_s"] == asked
    clock.advance(rule - 0.1)  # a busy host, its report on the way: healthy
    row = _row(service, "w1")
    assert not row["late"] and not fencing.worker_is_late(row)
    clock.advance(0.2)  # missed two intervals and the margin: late (lost only at 30 s)
    row = _row(service, "w1")
    assert row["late"] and fencing.worker_is_late(row)
    service.report("w1", [])
    assert not _row(service, "w1")["late"]


def test_the_controllers_own_stall_does_not_make_a_worker_late(svc):
    service, clock = svc
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    service.tick()
    service.report("w1", [])
    clock.advance(5.0)  # the controller's turn came 5 s late: its stall, not the worker's
    service.tick()
    assert not _row(service, "w1")["late"]


def test_a_row_from_a_controller_without_the_flag_is_judged_at_the_longest_interval():
    longest = fencing.late_after_s(fencing.REPORT_INTERVAL_MAX_S)
    assert not fencing.worker_is_late({"last_heard_s_ago": longest - 0.5})
    assert fencing.worker_is_late({"last_heard_s_ago": longest + 0.5})
