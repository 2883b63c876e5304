"""Drain, then delete: hosts of an idle slice a region is about to delete take no new work,
and the region hears which of them run nothing. A real ControllerService (SQLite in a
temp dir) with a FakeClock; the region's side is the pushes it would get (whole inventories,
SyncRegion, or what changed, SyncDelta)."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.controller.region_pushes import SyncDelta, SyncRegion
from iris.controller.service import ControllerConfig, ControllerService

ATTRS = {"cpu": "4", "memory": str(2**33), "region": "east", "slice_id": "s1"}


@pytest.fixture
def svc(tmp_path):
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1",
                                FakeClock())
    service.register_worker("s1-h0", "tcp://127.0.0.1:2", ATTRS, [])
    yield service
    service.close()


def _submit(service: ControllerService, name: str) -> str:
    return service.submit({"name": f"/alice/{name}", "user": "alice",
                           "resources": {"cpu": 1},
                           "entrypoint": {"kind": "command", "argv": ["true"]}})["job_id"]


def _drained(service: ControllerService) -> list[str] | None:
    """The hosts the region was told run nothing, from the pushes since the last look (None:
    no push)."""
    drained = None
    for m in service.pushes.take_outbox():
        if isinstance(m, SyncRegion):
            drained = set(m.drained)
        elif isinstance(m, SyncDelta):
            drained = (drained or set()) - set(m.undrained) | set(m.drained)
    return sorted(drained) if drained is not None else None


def test_draining_host_takes_no_new_work_and_is_reported_drained(svc):
    svc.pushes.take_outbox()
    svc.drain_hosts({"s1-h0": "s1"})
    assert _drained(svc) == ["s1-h0"]  # it runs nothing: the region may delete the slice
    job = _submit(svc, "late")
    assert svc.status(job)["state"] == "pending"
    assert [c.kind for c in svc.take_commands()] == []  # nothing started on a dying host
    svc.undrain_hosts(["s1-h0"])  # the region kept the slice after all
    assert svc.status(job)["state"] != "pending"
    assert [c.kind for c in svc.take_commands()] == ["start"]


def test_busy_host_is_not_reported_drained(svc):
    _submit(svc, "running")
    svc.pushes.take_outbox()
    svc.drain_hosts({"s1-h0": "s1"})
    assert _drained(svc) in (None, [])  # busy: the region keeps the slice


def test_drain_of_an_unknown_host_changes_nothing(svc):
    svc.pushes.take_outbox()
    svc.drain_hosts({"nobody": "s9"})
    assert svc.draining == {}
    with pytest.raises(Exception, match="hosts"):
        svc.drain_hosts(["not", "a", "dict"])
