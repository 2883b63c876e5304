"""One verdict on feasibility, without a config: the registered workers bound what can ever
run. A real ControllerService with a FakeClock."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import UnschedulableError
from iris.controller.service import ControllerConfig, ControllerService

ATTRS = {"cpu": "8", "memory": str(32 << 30)}


def _submit(service: ControllerService, resources: dict) -> str:
    return service.submit({"name": "/alice/big", "user": "alice", "resources": resources,
                           "entrypoint": {"kind": "command", "argv": ["true"]}})["job_id"]


def test_a_request_larger_than_every_registered_worker_is_refused(tmp_path):
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1",
                                FakeClock())
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    with pytest.raises(UnschedulableError, match="cpu=100000: the largest host offers 8"):
        _submit(service, {"cpu": 100000})
    with pytest.raises(UnschedulableError, match="memory=10 TiB: the largest host offers 32 GiB"):
        _submit(service, {"cpu": 1, "memory": "10TiB"})
    assert service.list_jobs() == []


def test_a_cluster_expecting_larger_workers_can_accept_it_as_pending(tmp_path):
    service = ControllerService(ControllerConfig(state_dir=tmp_path, accept_unfit=True),
                                "tcp://127.0.0.1:1", FakeClock())
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    job = _submit(service, {"cpu": 100000})
    assert service.status(job)["state"] == "pending"
