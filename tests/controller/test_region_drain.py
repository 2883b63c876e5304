"""The Region actor drains an idle slice before deleting it: it asks the controller to stop
placing there, deletes once told the hosts run nothing, and keeps the slice (undrain) if
work got there first. Real node and actor calls to a recording controller; a simulated
provider and a FakeClock."""

from __future__ import annotations

import queue

import pytest

from iris.actors import Node, NodeConfig, actor
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import FakeClock
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.simulated import SimulatedProvider
from iris.controller.regions.autoscaler import AutoscalerConfig
from iris.controller.regions.region import Region, RegionScaling

GROUP = ScaleGroupConfig("cpu", "east", "cpu", None, 1, 0, ("east-a",), max_slices=2)
CONFIG = AutoscalerConfig(scale_up_delay_s=0, scale_down_delay_s=10, hosts_register=False,
                          poll_interval_s=0)


@actor
class RecordingController:
    def __init__(self, heard: queue.Queue):
        self.heard = heard

    def drain_hosts(self, hosts: dict) -> None:
        self.heard.put(("drain", sorted(hosts)))

    def undrain_hosts(self, hosts: list) -> None:
        self.heard.put(("undrain", sorted(hosts)))

    def hosts_gone(self, gone: dict) -> None:
        self.heard.put(("gone", sorted(gone)))


@pytest.fixture
def region():
    heard: queue.Queue = queue.Queue()
    clock = FakeClock()
    provider = SimulatedProvider(clock)
    with Node(NodeConfig()) as node:
        node.host(CONTROLLER_KEY, RecordingController, (heard,))
        scaling = RegionScaling("east", (GROUP,), lambda _: provider, CONFIG)
        r = Region("east", [], clock, scaling=scaling, controller_address=node.address,
                   node=node)
        try:
            yield r, clock, provider, heard
        finally:
            r.on_stop()


def _step(r: Region, clock: FakeClock, seconds: float = 1.0) -> None:
    """One decide, its provider calls finished, their outcome folded in."""
    clock.advance(seconds)
    r.on_tick()
    assert r._slices.manager.settle(30)
    clock.advance(seconds)
    r.on_tick()


def _idle_slice(r: Region, clock: FakeClock, provider: SimulatedProvider) -> list[str]:
    r.sync([], [], {"cpu": 1})
    _step(r, clock)
    [info] = provider.list_slices()
    hosts = [h.host_id for h in info.hosts]
    r.sync([{"slice_id": info.slice_id, "hosts": hosts}], [], {})
    for _ in range(3):
        _step(r, clock, 5.0)  # idle past scale_down_delay: the delete is decided
    return hosts


def test_region_idle_slice_is_drained_then_deleted(region):
    r, clock, provider, heard = region
    hosts = _idle_slice(r, clock, provider)
    assert heard.get(timeout=30) == ("drain", hosts)
    assert len(provider.list_slices()) == 1  # nothing deleted before the controller answers
    assert r.stats()["capacity"]["in_flight"]["draining"] == [provider.list_slices()[0].slice_id]
    [info] = provider.list_slices()
    r.sync([{"slice_id": info.slice_id, "hosts": hosts}], [], {}, drained=hosts)
    assert heard.get(timeout=30) == ("gone", hosts)
    assert r._slices.manager.settle(30) and provider.list_slices() == []


def test_region_keeps_a_draining_slice_that_work_reached_first(region):
    r, clock, provider, heard = region
    hosts = _idle_slice(r, clock, provider)
    assert heard.get(timeout=30) == ("drain", hosts)
    [info] = provider.list_slices()
    r.sync([{"slice_id": info.slice_id, "hosts": hosts}], busy=hosts, unmet={})
    assert heard.get(timeout=30) == ("undrain", hosts)
    assert r._slices.manager.settle(30) and len(provider.list_slices()) == 1


def test_region_retires_a_draining_slice_after_its_work_ends_never_before(region):
    r, clock, provider, heard = region
    r.sync([], [], {"cpu": 1})
    _step(r, clock)
    [info] = provider.list_slices()
    hosts = [h.host_id for h in info.hosts]
    r.sync([{"slice_id": info.slice_id, "hosts": hosts}], busy=hosts, unmet={})
    _step(r, clock, 5.0)
    provider.drain(info.slice_id, "Slurm node n3 is drained: bad dimm")
    for _ in range(3):
        _step(r, clock, 5.0)
    assert heard.get(timeout=30) == ("drain", hosts)  # no new work there from now on
    for _ in range(4):  # long past the idle drain's timeout: a retirement waits for its work
        r.sync([{"slice_id": info.slice_id, "hosts": hosts}], busy=hosts, unmet={})
        _step(r, clock, 20.0)
    assert heard.empty() and len(provider.list_slices()) == 1
    retired = [d for d in r.stats()["capacity"]["decisions"] if d["action"] == "delete"]
    assert "retired: Slurm node n3 is drained" in retired[-1]["reason"]
    r.sync([{"slice_id": info.slice_id, "hosts": hosts}], [], {}, drained=hosts)
    assert heard.get(timeout=30) == ("gone", hosts)
    assert r._slices.manager.settle(30) and provider.list_slices() == []
