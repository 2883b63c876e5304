"""SimulatedProvider specifics: boot delay, scripted and random preemption, capacity, scale."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import CapacityError, NotFoundError
from iris.controller.providers.base import SliceState
from iris.controller.providers.simulated import SimulatedProvider
from tests.providers.conftest import ZONE_A, ZONE_B, cluster_config

V5E = cluster_config().scale_group("v5e-16")


def _on_demand(group):
    return type(group)(**{**group.__dict__, "preemptible": False})


def test_create_slice_with_boot_delay_is_creating_until_delay_passes():
    clock = FakeClock()
    provider = SimulatedProvider(clock, boot_delay_s=90.0)
    assert provider.create_slice(V5E, ZONE_A, "s-1").state is SliceState.CREATING
    clock.advance(89.0)
    assert provider.slice_status("s-1").state is SliceState.CREATING
    clock.advance(1.0)
    assert provider.slice_status("s-1").state is SliceState.READY


def test_preempt_scripted_in_future_keeps_slice_ready_until_then():
    clock = FakeClock()
    provider = SimulatedProvider(clock)
    provider.create_slice(V5E, ZONE_A, "s-1")
    provider.preempt("s-1", at=clock.monotonic() + 100.0)
    clock.advance(99.0)
    assert provider.slice_status("s-1").state is SliceState.READY
    clock.advance(1.0)
    assert provider.slice_status("s-1").state is SliceState.PREEMPTED


def test_preempt_unknown_slice_raises_not_found():
    with pytest.raises(NotFoundError, match="nope"):
        SimulatedProvider(FakeClock()).preempt("nope")


def _preempted_after(seed: int, hours: float, group=V5E) -> set[str]:
    clock = FakeClock()
    provider = SimulatedProvider(clock, preemption_rate_per_hour=0.5, seed=seed)
    for i in range(200):
        provider.create_slice(group, ZONE_A, f"s-{i}")
    clock.advance(hours * 3600.0)
    return {s.slice_id for s in provider.list_slices() if s.state is SliceState.PREEMPTED}


def test_random_preemption_same_seed_gives_same_preemptions():
    first = _preempted_after(seed=7, hours=2.0)
    assert first == _preempted_after(seed=7, hours=2.0)
    assert first != _preempted_after(seed=8, hours=2.0)
    # rate 0.5/h over 2 h: 1 - e^-1 = 63% expected; 200 draws land well inside 40-85%
    assert 80 <= len(first) <= 170


def test_random_preemption_never_touches_on_demand_groups():
    assert _preempted_after(seed=7, hours=100.0, group=_on_demand(V5E)) == set()


def test_create_slice_over_zone_capacity_raises_until_a_slice_is_deleted():
    provider = SimulatedProvider(FakeClock(), zone_capacity={ZONE_A: 8})
    provider.create_slice(V5E, ZONE_A, "s-1")
    provider.create_slice(V5E, ZONE_A, "s-2")
    with pytest.raises(CapacityError, match=f"zone {ZONE_A}.*8 of 8 in use"):
        provider.create_slice(V5E, ZONE_A, "s-3")
    provider.create_slice(V5E, ZONE_B, "s-3")  # other zones are not limited
    provider.preempt("s-1")  # preempted slices still hold their hosts until deleted
    with pytest.raises(CapacityError):
        provider.create_slice(V5E, ZONE_A, "s-4")
    provider.delete_slice("s-1")
    assert provider.create_slice(V5E, ZONE_A, "s-4").state is SliceState.READY


def test_thousands_of_hosts_created_listed_and_deleted_in_one_process():
    provider = SimulatedProvider(FakeClock(), boot_delay_s=30.0)
    for i in range(2_000):
        provider.create_slice(V5E, ZONE_A if i % 2 else ZONE_B, f"s-{i}")
    listed = provider.list_slices("v5e-16")
    assert provider.host_count() == 8_000
    assert len(listed) == 2_000
    assert len({h.address for s in listed for h in s.hosts}) == 8_000
    for i in range(2_000):
        provider.delete_slice(f"s-{i}")
    assert provider.host_count() == 0
