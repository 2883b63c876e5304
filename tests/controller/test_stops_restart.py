"""A controller restart forgets nothing about stops in flight: a task evicted just before the
restart still waits for its old attempt (spending its grace period in an on_preempt
checkpoint) to exit, though a free worker is right there. Real SQLite, a fake clock."""

from __future__ import annotations

from iris.base.clock import FakeClock
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.service import ControllerService
from tests.controller.test_event_replay import _service, _starts

A = {"cpu": "1", "memory": str(2**33), "region": "r1", "slot": "a"}
B = {"cpu": "1", "memory": str(2**33), "region": "r1", "slot": "b"}


def _submit(svc: ControllerService, name: str, **extra) -> str:
    return svc.submit({"name": f"/alice/{name}", "user": "alice", "resources": {"cpu": 1},
                       "entrypoint": {"kind": "command", "argv": ["true"]}, **extra})["job_id"]


def _batch_running_on_a(tmp_path, clock: FakeClock) -> tuple[ControllerService, str, str]:
    """A service whose one worker, a, runs a batch task. Returns (service, batch, attempt)."""
    svc = _service(tmp_path, clock)
    svc.register_worker("a", "tcp://127.0.0.1:2", A, [])
    batch = _submit(svc, "batch", priority="batch")
    svc.tick()
    (old,) = _starts(svc)
    svc.report("a", [{"attempt_id": old, "status": "running"}])
    return svc, batch, old


def _evicted_then_restarted(tmp_path, clock: FakeClock) -> tuple[ControllerService, str, str]:
    """The batch task runs on a; a production job pinned to a evicts it; the controller
    is restarted while the old attempt still stops, and worker b, free, registers with the
    new one. Returns (new service, batch, old attempt)."""
    svc, batch, old = _batch_running_on_a(tmp_path, clock)
    _submit(svc, "urgent", priority="production", constraints={"slot": "a"})
    svc.tick()
    stops = [c for c in svc.take_commands() if c.kind == "stop"]
    assert [c.body["attempt_id"] for c in stops] == [old]
    assert svc.state.tasks[(batch, 0)].state.value == "pending"  # requeued at once
    svc.close()  # the controller goes down (its file is all that remains)
    svc = _service(tmp_path, clock)
    svc.register_worker("b", "tcp://127.0.0.1:3", B, [])  # free, and the batch task fits
    return svc, batch, old


def test_a_task_evicted_before_a_restart_waits_for_its_old_attempt_after_it(tmp_path):
    clock = FakeClock()
    svc, batch, old = _evicted_then_restarted(tmp_path, clock)
    try:
        svc.register_worker("a", "tcp://127.0.0.1:2", A, [old])  # still saying goodbye
        svc.tick()
        assert not [c for c in svc.take_commands() if c.kind == "start" and c.worker_id == "b"]
        reason = svc.status(batch)["pending_reason"]
        assert reason["code"] == ReasonCode.PREVIOUS_ATTEMPT_STOPPING.value, reason
        clock.advance(2.0)
        svc.report("a", [{"attempt_id": old, "status": "exited", "exit_code": -15}])
        svc.tick()
        starts = {svc.state.attempts[a].job_id: w for a, w in _starts(svc).items()}
        assert starts[batch] == "b", starts  # only now, on the free worker
    finally:
        svc.close()


def test_stops_of_a_worker_that_never_comes_back_end_with_the_restart_grace(tmp_path):
    clock = FakeClock()
    svc, batch, _ = _evicted_then_restarted(tmp_path, clock)
    try:
        svc.tick()
        assert not _starts(svc)  # a may still be stopping it
        for _ in range(int(svc.config.restart_grace_s) + 2):  # a never returns: its
            clock.advance(1.0)                               # processes, the old attempt's
            svc.report("b", [])                              # too, are gone with it
            svc.tick()
        starts = {svc.state.attempts[a].job_id: w for a, w in _starts(svc).items()}
        assert starts[batch] == "b", starts
        assert svc.store.load_stops() == []
    finally:
        svc.close()


class _Died(BaseException):
    """The controller's process ends here (kill -9): nothing after this point runs."""


def test_a_crash_right_after_an_eviction_commits_still_leaves_its_stop_on_record(tmp_path):
    """The eviction's commit and the record of its stop are one transaction: a controller
    killed between the two wrote the task back to pending with no record that its old
    attempt still runs, and after the restart the task started on a free worker beside it."""
    clock = FakeClock()
    svc, batch, old = _batch_running_on_a(tmp_path, clock)

    def dies_here(**change) -> None:  # any write of the stop after the eviction's commit
        raise _Died

    svc.store.save_stops = dies_here
    try:
        _submit(svc, "urgent", priority="production", constraints={"slot": "a"})
        svc.tick()  # the eviction (in the submit's own turn, or at the latest here)
    except _Died:
        pass
    assert svc.state.tasks[(batch, 0)].state.value == "pending"  # requeued and committed
    svc.close()
    svc = _service(tmp_path, clock)
    try:
        svc.register_worker("b", "tcp://127.0.0.1:3", B, [])  # free, and the batch task fits
        svc.tick()
        assert not [c for c in svc.take_commands() if c.kind == "start" and c.worker_id == "b"]
        assert svc.status(batch)["pending_reason"]["code"] == \
            ReasonCode.PREVIOUS_ATTEMPT_STOPPING.value
        assert [row[0] for row in svc.store.load_stops()] == [old]
    finally:
        svc.close()
