"""The controller's events are stored with its records, and replaying them rebuilds its state.

Drives a real ControllerService (SQLite in a temp dir, FakeClock) through a scenario with
every kind of change: submits, placement on two workers, starts, a result, a failure that is
retried, a kill, a worker that goes silent and its work requeued, a controller restart. Then
the event log read back from the file, run through the job kernel from nothing, must give
the state the controller holds and the state its file holds."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import StorageError
from iris.controller.jobs import event_log
from iris.controller.jobs import events as ev
from iris.controller.jobs.state import KernelConfig
from iris.controller.service import ControllerConfig, ControllerService

ATTRS = {"cpu": "2", "memory": str(2**33), "region": "r1"}
KERNEL = KernelConfig(stop_grace_s=2.0)


def _service(tmp_path, clock) -> ControllerService:
    return ControllerService(ControllerConfig(state_dir=tmp_path, stop_grace_s=2.0,
                                              worker_dead_after_s=5.0,
                                              restart_grace_s=5.0),
                             "tcp://127.0.0.1:1", clock)


def _submit(svc: ControllerService, name: str, **extra) -> str:
    return svc.submit({"name": f"/alice/{name}", "user": "alice", "resources": {"cpu": 1},
                       "entrypoint": {"kind": "command", "argv": ["true"]}, **extra})["job_id"]


def _starts(svc: ControllerService) -> dict[str, str]:
    """attempt id -> worker of the start commands queued since last asked."""
    return {c.body["attempt_id"]: c.worker_id for c in svc.take_commands() if c.kind == "start"}


def _report(svc: ControllerService, worker: str, *updates: dict) -> None:
    svc.report(worker, list(updates))


def _replayed(svc: ControllerService):
    return event_log.replayable(event_log.replay(svc.store.logged_events(), KERNEL,
                                                 svc.store.replay_base()))


def _scenario(svc: ControllerService, clock: FakeClock) -> dict[str, str]:
    svc.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    svc.register_worker("w2", "tcp://127.0.0.1:3", ATTRS, [])
    jobs = {"pair": _submit(svc, "pair", replicas=2),
            "flaky": _submit(svc, "flaky", max_retries_failure=1),
            "doomed": _submit(svc, "doomed"),
            "queued": _submit(svc, "queued")}  # 4 cpus, 5 tasks: this one waits
    svc.tick()
    first = _starts(svc)
    assert len(first) == 4
    by_job = {svc.state.attempts[a].job_id: a for a in first}
    for attempt, worker in first.items():
        _report(svc, worker, {"attempt_id": attempt, "status": "running"})
    pair = [a for a in first if svc.state.attempts[a].job_id == jobs["pair"]]
    _report(svc, first[pair[0]], {"attempt_id": pair[0], "status": "exited", "exit_code": 0,
                                  "result": b"\x80\x04K\x07."})
    flaky = by_job[jobs["flaky"]]
    _report(svc, first[flaky], {"attempt_id": flaky, "status": "exited", "exit_code": 3,
                                "error": "exit 3"})
    svc.kill(jobs["doomed"], "no longer wanted")
    svc.tick()
    for _ in range(12):  # w2 says nothing more: lost, its work requeued
        clock.advance(0.5)
        _report(svc, "w1")
        svc.tick()
    return jobs


def test_replaying_the_stored_events_rebuilds_the_controllers_state(tmp_path):
    clock = FakeClock()
    svc = _service(tmp_path, clock)
    try:
        jobs = _scenario(svc, clock)
        assert "w2" not in svc.workers.workers
        assert svc.state.tasks[(jobs["flaky"], 0)].failures == 1
        replayed = _replayed(svc)
        assert replayed == event_log.replayable(svc.state)
        assert replayed == event_log.replayable(svc.store.load(KERNEL))
        kinds = {kind for _, kind, _ in svc.store.logged_events()}
        assert {"Submit", "Assign", "AttemptRunning", "AttemptExited", "Kill",
                "WorkerLost"} <= kinds
    finally:
        svc.close()


def test_the_log_continues_across_a_controller_restart_and_still_replays(tmp_path):
    clock = FakeClock()
    svc = _service(tmp_path, clock)
    try:
        jobs = _scenario(svc, clock)
    finally:
        svc.close()
    svc = _service(tmp_path, clock)
    try:
        svc.register_worker("w1", "tcp://127.0.0.1:2", ATTRS,
                            sorted(svc.state.by_worker.get("w1", ())))
        _submit(svc, "after-restart")
        svc.kill(jobs["queued"], "changed my mind")
        svc.tick()
        assert _replayed(svc) == event_log.replayable(svc.state)
    finally:
        svc.close()


def test_pruning_folds_the_log_and_replay_still_rebuilds_the_state(tmp_path):
    """Finished jobs pruned and the log folded into a replay base: the log is short again,
    and base + log still gives exactly the controller's state, before and after more
    changes and a restart (whose start-up prune folds again)."""
    clock = FakeClock()
    svc = _service(tmp_path, clock)
    try:
        jobs = _scenario(svc, clock)
        clock.advance(svc.config.retention_s + 1)  # the killed job is past retention
        _report(svc, "w1")
        svc.prune()  # few rows: the hourly prune folds only a long log
        assert jobs["doomed"] not in svc.state.jobs
        assert _replayed(svc) == event_log.replayable(svc.state)
        gone = svc.store.compact_event_log(clock.wall())
        assert gone > 0 and svc.store.logged_events() == []
        assert _replayed(svc) == event_log.replayable(svc.state)
        svc.kill(jobs["queued"], "changed my mind")
        _submit(svc, "after-fold")
        svc.tick()
        assert 0 < len(svc.store.logged_events()) < gone
        assert _replayed(svc) == event_log.replayable(svc.state)
    finally:
        svc.close()
    clock.advance(svc.config.retention_s + 1)
    svc = _service(tmp_path, clock)  # prunes the killed job at start, folding the log
    try:
        assert jobs["queued"] not in svc.state.jobs
        assert svc.store.logged_events() == []
        assert _replayed(svc) == event_log.replayable(svc.state)
    finally:
        svc.close()


def test_an_event_that_changes_nothing_is_not_logged(tmp_path):
    clock = FakeClock()
    svc = _service(tmp_path, clock)
    try:
        svc.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
        before = len(svc.store.logged_events())
        for _ in range(5):
            svc.tick()  # nothing due: no rows
        assert len(svc.store.logged_events()) == before
    finally:
        svc.close()


@pytest.mark.parametrize("event", [
    ev.Submit("e1", None), ev.Assign("e2", (ev.Placement("j", 0, "w", "a"),)),
    ev.AttemptExited("e3", "a", 0, "", b"big result"), ev.Reconcile("e4", "w", ("a", "b")),
    ev.Prune("e5", 3600.0)])
def test_event_log_rows_decode_to_the_event(event):
    if isinstance(event, ev.Submit):
        from tests.controller.test_job_support import spec
        event = ev.Submit("e1", spec("train"))
    back = event_log.decode(*event_log.encode(event))
    if isinstance(event, ev.AttemptExited):  # the bytes stay in the results table only
        assert back == ev.AttemptExited("e3", "a", 0, "", b"")
    elif isinstance(event, ev.Submit):
        assert back.spec.to_dict() == event.spec.to_dict()
    else:
        assert back == event


def test_a_corrupt_event_row_is_a_storage_error():
    with pytest.raises(StorageError, match="event log"):
        event_log.decode("Assign", b"\x81\xa3bad\xc0")
