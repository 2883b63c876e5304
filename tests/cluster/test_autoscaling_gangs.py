"""Gangs on autoscaled TPU slices: demand for a 4-host gang grows a whole slice, the gang
lands on it whole, and when the cloud takes the slice back the gang is requeued whole and
finishes on a replacement. Slices are LocalProvider processes with TPU VM attributes."""

from __future__ import annotations

import pytest

import iris
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import SliceState
from iris.controller.providers.local import LocalProvider
from iris.controller.regions.autoscaler import AutoscalerConfig
from iris.controller.regions.region import RegionScaling
from tests.cluster.tasks import hold_until

GROUP = ScaleGroupConfig("v5e-16", "east", "tpu", "v5litepod-16", 4, 4, ("east-a",),
                         min_slices=0, max_slices=2)
FAST = AutoscalerConfig(scale_up_delay_s=0.2, scale_down_delay_s=2.0, backoff_initial_s=1.0,
                        backoff_max_s=2.0, host_lost_grace_s=2.0, churn_window_s=0.0,
                        poll_interval_s=0.5)
GANG = iris.Resources(tpu="v5litepod-16", cpu=1)


@pytest.fixture
def tpu_region(tmp_path):
    made: list[LocalProvider] = []

    def provider(address: str) -> LocalProvider:
        made.append(LocalProvider(address, tmp_path / "hosts", "east"))
        return made[0]

    with iris.local_cluster(state_dir=tmp_path / "c", stop_grace_s=2.0,
                            autoscale=[RegionScaling("east", (GROUP,), provider, FAST)]) as c:
        yield c, made[0]


def _slices(job) -> set[str]:
    return {t["worker_id"].rsplit("-h", 1)[0] for t in job.tasks()}


def test_gang_demand_grows_a_whole_slice_and_the_gang_lands_on_it(tpu_region, tmp_path,
                                                                  wait_until):
    cluster, provider = tpu_region
    assert provider.list_slices() == []
    job = iris.submit(hold_until, str(tmp_path / "go"), resources=GANG, name="gang")
    wait_until(lambda: job.status()["state"] == "running", 180, "the gang running")
    [slice_id] = _slices(job)  # whole, on one slice, one task per host
    assert [s.slice_id for s in provider.list_slices()] == [slice_id]
    assert len({t["worker_id"] for t in job.tasks()}) == 4
    (tmp_path / "go").touch()
    assert sorted(job.result(timeout=120)) == ["0", "1", "2", "3"]
    wait_until(lambda: provider.list_slices() == [], 120, "the idle slice deleted")


def test_preempted_slice_requeues_the_gang_whole_onto_a_replacement(tpu_region, tmp_path,
                                                                    wait_until):
    cluster, provider = tpu_region
    gate = tmp_path / "go"
    job = iris.submit(hold_until, str(gate), resources=GANG, name="gang")
    wait_until(lambda: job.status()["state"] == "running", 180, "the gang running")
    [first] = _slices(job)
    provider.preempt(first)
    wait_until(lambda: job.status()["state"] == "running" and _slices(job) != {first}, 180,
               "the gang running on another slice")
    assert len(_slices(job)) == 1  # whole again, on one replacement slice
    gate.touch()
    assert sorted(job.result(timeout=120)) == ["0", "1", "2", "3"]
    tasks = job.tasks()
    assert all(t["attempts"] == 2 and t["failures"] == 0 for t in tasks), tasks
    wait_until(lambda: all(s.state is not SliceState.PREEMPTED
                           for s in provider.list_slices()), 60, "the preempted slice deleted")
