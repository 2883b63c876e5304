"""Lost start and stop commands are sent again from the worker's heartbeat.

Drives a real ControllerService (SQLite store in a temp dir) with a FakeClock; the
commands it queues are what the actor would send, and "lost" means the test never
delivers them."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.controller.service import ControllerConfig, ControllerService

ATTRS = {"cpu": "4", "memory": str(2**33), "region": "r1"}


@pytest.fixture
def svc(tmp_path):
    clock = FakeClock()
    service = ControllerService(ControllerConfig(state_dir=tmp_path, stop_grace_s=2.0),
                                "tcp://127.0.0.1:1", clock)
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    yield service, clock
    service.close()


def _submit(service: ControllerService) -> str:
    return service.submit({"name": "/alice/job", "user": "alice", "resources": {"cpu": 1},
                           "entrypoint": {"kind": "command", "argv": ["true"]}})["job_id"]


def _kinds(service: ControllerService) -> list[tuple[str, str]]:
    return [(c.kind, c.body["attempt_id"]) for c in service.take_commands()]


def test_lost_start_is_sent_again_after_the_worker_still_lacks_it(svc):
    service, clock = svc
    _submit(service)
    [(kind, attempt)] = _kinds(service)  # ...and the call is lost
    assert kind == "start"
    service.report("w1", [], running=[])
    assert _kinds(service) == []  # a start takes milliseconds: not yet suspicious
    clock.advance(11)
    service.report("w1", [], running=[])
    assert _kinds(service) == [("start", attempt)]
    service.report("w1", [{"attempt_id": attempt, "status": "running"}], running=[attempt])
    clock.advance(11)
    service.report("w1", [], running=[attempt])
    assert _kinds(service) == []  # running: nothing to repair


def test_lost_stop_is_sent_again_after_its_grace_and_cleared_once_gone(svc):
    service, clock = svc
    job = _submit(service)
    [(_, attempt)] = _kinds(service)
    service.report("w1", [{"attempt_id": attempt, "status": "running"}], running=[attempt])
    service.kill(job)
    assert _kinds(service) == [("stop", attempt)]  # ...and the call is lost
    assert attempt in service.stopping["w1"]
    clock.advance(3)
    service.report("w1", [], running=[attempt])
    assert _kinds(service) == []  # within grace (2 s) + 5 s
    clock.advance(5)
    service.report("w1", [], running=[attempt])
    assert _kinds(service) == [("stop", attempt)]
    service.report("w1", [], running=[])  # gone, though its exit update never came
    assert "w1" not in service.stopping


def test_orphan_attempt_nobody_wants_is_stopped(svc):
    service, _ = svc
    service.report("w1", [], running=["att-from-a-previous-life"])
    assert _kinds(service) == [("stop", "att-from-a-previous-life")]
    service.report("w1", [], running=["att-from-a-previous-life"])
    assert _kinds(service) == []  # told once; again only after the grace
    service.report("w1", [], running=[])
    assert service.stopping == {}
