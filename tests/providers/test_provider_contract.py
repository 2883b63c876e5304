"""The Provider contract (providers/base.py), run against every implementation."""

from __future__ import annotations

import threading

import pytest

from iris.base.errors import CapacityError, ConflictError, InvalidRequestError
from iris.controller.providers.base import SliceInfo, SliceState
from tests.providers.conftest import ZONE_A, ZONE_B, ProviderHarness

# Only a provider with real machines (LocalProvider) needs more than one round; the others
# settle at once. 30 s is the floor for polling anything external on a loaded machine.
_READY_DEADLINE_S = 30.0


def _wait_for(harness: ProviderHarness, slice_id: str, state: SliceState) -> SliceInfo:
    pause = threading.Event()
    for _ in range(int(_READY_DEADLINE_S / 0.05)):
        harness.settle()
        info = harness.provider.slice_status(slice_id)
        if info.state is state:
            return info
        pause.wait(0.05)
    raise AssertionError(f"{slice_id} never reached {state}; last seen {info}")


def test_create_slice_multi_host_group_becomes_ready_with_every_host(harness):
    group = harness.config.scale_group("v5e-16")
    created = harness.provider.create_slice(group, ZONE_A, "test-v5e-16-1")
    assert created.state in (SliceState.CREATING, SliceState.READY)
    info = _wait_for(harness, "test-v5e-16-1", SliceState.READY)
    assert (info.group, info.zone) == ("v5e-16", ZONE_A)
    assert len(info.hosts) == 4
    assert len({h.host_id for h in info.hosts}) == 4
    assert all(h.address for h in info.hosts)


def test_list_slices_filtered_by_group_shows_only_that_group(harness):
    v5e, v4 = harness.config.scale_group("v5e-16"), harness.config.scale_group("v4-8")
    harness.provider.create_slice(v5e, ZONE_A, "test-v5e-16-1")
    harness.provider.create_slice(v5e, ZONE_B, "test-v5e-16-2")
    harness.provider.create_slice(v4, ZONE_B, "test-v4-8-1")
    everything = {s.slice_id for s in harness.provider.list_slices()}
    assert everything == {"test-v5e-16-1", "test-v5e-16-2", "test-v4-8-1"}
    only_v4 = harness.provider.list_slices(group="v4-8")
    assert [(s.slice_id, s.zone) for s in only_v4] == [("test-v4-8-1", ZONE_B)]
    # A slice still queued (Slurm's PENDING) may not know its hosts yet; once READY it does.
    _wait_for(harness, "test-v4-8-1", SliceState.READY)
    assert [len(s.hosts) for s in harness.provider.list_slices(group="v4-8")] == [1]


def test_delete_slice_then_status_is_not_found_and_delete_again_is_noop(harness):
    group = harness.config.scale_group("v4-8")
    harness.provider.create_slice(group, ZONE_B, "test-v4-8-1")
    harness.provider.delete_slice("test-v4-8-1")
    assert harness.provider.slice_status("test-v4-8-1").state is SliceState.NOT_FOUND
    assert harness.provider.list_slices() == []
    harness.provider.delete_slice("test-v4-8-1")
    harness.provider.delete_slice("never-existed")


def test_create_slice_duplicate_id_raises_conflict_and_keeps_original(harness):
    group = harness.config.scale_group("v5e-16")
    harness.provider.create_slice(group, ZONE_A, "test-dup")
    with pytest.raises(ConflictError):
        harness.provider.create_slice(group, ZONE_B, "test-dup")
    info = _wait_for(harness, "test-dup", SliceState.READY)
    assert info.zone == ZONE_A
    assert len(harness.provider.list_slices()) == 1


def test_create_slice_stocked_out_zone_raises_capacity_error_naming_zone(harness):
    group = harness.config.scale_group("v5e-16")
    harness.stock_out(ZONE_A)
    with pytest.raises(CapacityError, match=ZONE_A):
        harness.provider.create_slice(group, ZONE_A, "test-v5e-16-1")
    assert harness.provider.slice_status("test-v5e-16-1").state is SliceState.NOT_FOUND
    assert harness.provider.list_slices() == []
    harness.provider.create_slice(group, ZONE_B, "test-v5e-16-1")
    assert _wait_for(harness, "test-v5e-16-1", SliceState.READY).zone == ZONE_B


def test_slice_status_preempted_slice_reports_preempted_until_deleted(harness):
    group = harness.config.scale_group("v5e-16")
    harness.provider.create_slice(group, ZONE_A, "test-v5e-16-1")
    _wait_for(harness, "test-v5e-16-1", SliceState.READY)
    harness.preempt("test-v5e-16-1")
    assert harness.provider.slice_status("test-v5e-16-1").state is SliceState.PREEMPTED
    assert [s.state for s in harness.provider.list_slices()] == [SliceState.PREEMPTED]
    harness.provider.delete_slice("test-v5e-16-1")
    assert harness.provider.list_slices() == []


@pytest.mark.parametrize(("zone", "slice_id", "field"), [
    ("us-central2-a", "Bad_ID!", "slice_id"),
    ("us-central2-a", "", "slice_id"),
    ("europe-west4-a", "test-ok-1", "zone"),
])
def test_create_slice_bad_input_refused_and_nothing_created(harness, zone, slice_id, field):
    group = harness.config.scale_group("v5e-16")
    with pytest.raises(InvalidRequestError) as err:
        harness.provider.create_slice(group, zone, slice_id)
    assert err.value.field == field
    assert harness.provider.list_slices() == []
