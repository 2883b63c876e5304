"""Autoscaling on real worker processes: demand grows a scale group, idleness shrinks it,
a stocked-out zone says so in why-pending, and a preempted slice's task finishes elsewhere.

The controller's Region actor runs the autoscaler over a LocalProvider, whose slices are
`iris worker` processes on this machine; delays are seconds so the test is quick.
"""

from __future__ import annotations

import threading

import pytest

import iris
from iris.actors.keys import CONTROLLER_KEY
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import SliceState
from iris.controller.providers.local import LocalProvider
from iris.controller.regions.autoscaler import AutoscalerConfig
from iris.controller.regions.region import RegionScaling
from tests.cluster.tasks import hold_until

GROUP = ScaleGroupConfig("cpu", "east", "cpu", None, 1, 0, ("east-a",), min_slices=0,
                         max_slices=2)
FAST = AutoscalerConfig(scale_up_delay_s=0.2, scale_down_delay_s=2.0, backoff_initial_s=1.0,
                        backoff_max_s=2.0, host_lost_grace_s=2.0, poll_interval_s=0.5)


@pytest.fixture
def scaled(tmp_path):
    """A cluster with no workers of its own; region `east` grows through a LocalProvider."""
    made: list[LocalProvider] = []

    def provider(address: str) -> LocalProvider:
        made.append(LocalProvider(address, tmp_path / "hosts", "east"))
        return made[0]

    scaling = RegionScaling("east", (GROUP,), provider, FAST)
    with iris.local_cluster(state_dir=tmp_path / "c", stop_grace_s=2.0,
                            autoscale=[scaling]) as cluster:
        yield cluster, made[0]


def _snapshot(cluster) -> dict:
    return cluster.node.call(cluster.address, CONTROLLER_KEY, "snapshot").result(60)


def _live_slices(provider) -> list:
    return [s for s in provider.list_slices() if s.state is not SliceState.PREEMPTED]


def _actions(cluster) -> list[str]:
    capacity = _snapshot(cluster).get("capacity") or [{"decisions": []}]
    return [d["action"] for d in capacity[0]["decisions"]]


def test_demand_scales_a_group_up_and_idle_capacity_scales_it_down(scaled, wait_until):
    cluster, provider = scaled
    assert provider.list_slices() == []  # min_slices 0: nothing runs before there is work
    job = iris.submit(lambda: "done", resources=iris.Resources(cpu=1))
    assert job.result(timeout=180) == "done"
    assert len(provider.list_slices()) == 1
    wait_until(lambda: provider.list_slices() == [], 120, "the idle slice to be deleted")
    # the capacity report (the dashboard's) lags by a stats poll: wait for it to say so
    wait_until(lambda: _actions(cluster)[:2] == ["create", "delete"], 60, "both decisions")
    group = _snapshot(cluster)["capacity"][0]["groups"][0]
    assert group["group"] == "cpu" and group["max"] == 2


def test_stocked_out_zone_is_named_in_why_pending_until_capacity_returns(scaled, wait_until):
    cluster, provider = scaled
    provider.set_capacity("east-a", 0)
    job = iris.submit(lambda: "done", resources=iris.Resources(cpu=1))
    reason = wait_until(lambda: "held back" in job.status().get("pending_reason", {}).get(
        "message", "") and job.status()["pending_reason"], 120, "a held-back reason")
    assert "east-a" in reason["message"] and "east" in reason["details"]["autoscaler"]
    provider.set_capacity("east-a", None)  # stock is back: the backoff ends, the slice comes
    assert job.result(timeout=180) == "done"
    wait_until(lambda: "create_failed" in _actions(cluster), 60, "the failed create reported")


def test_preempted_slice_task_finishes_on_a_replacement_slice(scaled, tmp_path, wait_until):
    cluster, provider = scaled
    gate = tmp_path / "go"
    job = iris.submit(hold_until, str(gate), resources=iris.Resources(cpu=1))
    wait_until(lambda: job.status()["state"] == "running", 180, "the task running")
    first = job.tasks()[0]["worker_id"]
    provider.preempt(first.rsplit("-h", 1)[0])  # the cloud takes the slice back
    wait_until(lambda: job.tasks()[0]["worker_id"] not in (None, first)
               and job.status()["state"] == "running", 180, "the task running elsewhere")
    gate.touch()
    assert job.result(timeout=180) == "0"
    task = job.tasks()[0]
    assert task["state"] == "succeeded" and task["attempts"] == 2
    assert task["preemptions"] == 1 and task["failures"] == 0  # the preemption budget paid
    assert task["worker_id"].rsplit("-h", 1)[0] != first.rsplit("-h", 1)[0]  # another slice
    wait_until(lambda: all(s.state is not SliceState.PREEMPTED
                           for s in provider.list_slices()), 60, "the preempted slice deleted")


class _GatedProvider(LocalProvider):
    """A LocalProvider whose creates wait for the test, as a cloud's slow create would."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()

    def create_slice(self, group, zone, slice_id):
        self.gate.wait(120)
        return super().create_slice(group, zone, slice_id)


def test_pending_reason_says_scaling_up_in_the_region_while_a_slice_is_created(tmp_path,
                                                                               wait_until):
    made: list[_GatedProvider] = []

    def provider(address: str) -> _GatedProvider:
        made.append(_GatedProvider(address, tmp_path / "hosts", "east"))
        return made[0]

    scaling = RegionScaling("east", (GROUP,), provider, FAST)
    with iris.local_cluster(state_dir=tmp_path / "c", autoscale=[scaling]):
        job = iris.submit(lambda: "done", resources=iris.Resources(cpu=1))
        reason = wait_until(lambda: (job.status().get("pending_reason") or {}).get("code")
                            == "SCALING_UP" and job.status()["pending_reason"], 120,
                            "a SCALING_UP reason")
        assert reason["details"]["regions"] == ["east"] and "east" in reason["message"]
        made[0].gate.set()
        assert job.result(timeout=180) == "done"
