"""A storage error caused by a request fails that request alone; a real storage failure halts
the controller visibly. A real ControllerService on a real SQLite file, with a FakeClock."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import InvalidRequestError, IrisError, StorageError
from iris.controller.service import ControllerConfig, ControllerService

ATTRS = {"cpu": "4", "memory": str(2**33)}


def _service(tmp_path, **config) -> ControllerService:
    service = ControllerService(ControllerConfig(state_dir=tmp_path, **config),
                                "tcp://127.0.0.1:1", FakeClock())
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    return service


def _submit(service: ControllerService, name: str) -> str:
    return service.submit({"name": f"/alice/{name}", "user": "alice", "resources": {"cpu": 1},
                           "entrypoint": {"kind": "command", "argv": ["true"]}})["job_id"]


def test_unstorable_result_is_refused_and_nothing_changes(tmp_path):
    service = _service(tmp_path)
    job = _submit(service, "one")
    attempt = service.status(job)["tasks"][0]["attempt_id"]
    before = service.status(job)
    with pytest.raises(InvalidRequestError, match="result"):
        service.report("w1", [{"attempt_id": attempt, "status": "exited", "exit_code": 0,
                               "result": {"not": "bytes"}}])
    assert service.status(job) == before
    service.report("w1", [{"attempt_id": attempt, "status": "exited", "exit_code": 0,
                           "result": b"ok"}])  # the real report still lands
    assert service.status(job)["state"] == "succeeded"
    assert service.results(job) == {0: b"ok"}
    service.close()


def test_a_failing_disk_halts_the_controller_and_says_why(tmp_path):
    reasons: list[str] = []
    service = _service(tmp_path, on_fatal=reasons.append)
    service.store._db.close()  # the file can no longer be written: as a failed disk would
    with pytest.raises(StorageError):
        _submit(service, "lost")
    assert len(reasons) == 1 and "job store" in reasons[0]
    with pytest.raises(IrisError, match="halted"):  # from then on, never half-working
        _submit(service, "after")
    assert len(reasons) == 1

