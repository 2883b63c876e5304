"""Gang jobs through the controller's Region actors: three regions of real worker processes.

us-east and us-central each have one 4-host v5litepod-16 slice (LocalProvider processes that
register with the region, zone and slice attributes a TPU VM has); eu-west has only a CPU
host. A 4-host gang job must land whole on one slice, two of them in different regions, a
third wait with a reason until a slice frees, and the reservations must all end released.
The module's tests share that cluster (one controller, nine workers).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import pytest

import iris
from iris.actors.context import ClusterContext
from iris.actors.keys import region_key
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.local import LocalProvider
from tests.cluster.controller_state import call, regions_free
from tests.cluster.tasks import hold_until
from tests.conftest import wait_for

TPU = {"accelerator_type": "v5litepod-16", "accelerator_count": "4"}
TPU_JOB = iris.Resources(tpu="v5litepod-16", cpu=1)


def _tpu_group(region: str) -> ScaleGroupConfig:
    return ScaleGroupConfig("v5e-16", region, "tpu", "v5litepod-16", 4, 4, (f"{region}-a",))





class _Regions(NamedTuple):
    cluster: ClusterContext
    providers: dict[str, LocalProvider]


@pytest.fixture(scope="module")
def _three_region_cluster(tmp_path_factory):
    """Nine worker processes in three regions, shared by the module's tests that need no
    other topology (each waits for the slices to be free, see three_regions)."""
    root = tmp_path_factory.mktemp("three-regions")
    with iris.local_cluster(state_dir=root / "c", worker_attrs=TPU,
                            stop_grace_s=2.0) as cluster:
        providers = {r: LocalProvider(cluster.address, root / r, r)
                     for r in ("us-east", "us-central", "eu-west")}
        try:
            providers["us-east"].create_slice(_tpu_group("us-east"), "us-east-a", "east-1")
            providers["us-central"].create_slice(_tpu_group("us-central"), "us-central-a",
                                                 "central-1")
            cpu = ScaleGroupConfig("cpu", "eu-west", "cpu", None, 1, 0, ("eu-west-a",))
            providers["eu-west"].create_slice(cpu, "eu-west-a", "west-1")
            wait_for(lambda: len(call(cluster, "list_workers")) == 9
                     and regions_free(cluster, providers), 180,
                     "nine workers in three regions to register, and the regions' actors")
            yield _Regions(cluster, providers)
        finally:
            for provider in providers.values():
                provider.close()


@pytest.fixture
def three_regions(_three_region_cluster):
    """The shared cluster, current for this test, once no gang of an earlier test holds a
    slice (every reservation released)."""
    from iris.actors.current import current_context

    cluster = _three_region_cluster.cluster
    wait_for(lambda: regions_free(cluster, _three_region_cluster.providers), 120,
             "the slices of earlier tests' gangs released")
    token = current_context.set(cluster)
    yield _three_region_cluster
    current_context.reset(token)


def _slice_of(job) -> set[str]:
    return {t["worker_id"].rsplit("-h", 1)[0] for t in job.tasks()}


def test_gang_jobs_land_whole_in_one_region_each_and_a_third_waits_for_a_slice(
        three_regions, tmp_path, wait_until):
    cluster = three_regions.cluster
    regions = tuple(three_regions.providers)
    # The cluster is shared: count this test's reservations from what the others left.
    before = {r: call(cluster, "stats", key=region_key(r)) for r in regions}
    snapshot_before = call(cluster, "snapshot")["gang_reservations"]["committed"]
    gate = tmp_path / "go"
    first = [iris.submit(hold_until, str(gate), resources=TPU_JOB, name=f"gang-{i}")
             for i in range(2)]
    for job in first:
        wait_until(lambda j=job: j.status()["state"] == "running", 120, f"{job} running")
    slices = [_slice_of(job) for job in first]
    assert all(len(s) == 1 for s in slices), slices  # each gang whole on one slice
    assert slices[0] != slices[1]  # so the two went to different regions
    assert sum(len(job.tasks()) for job in first) == 8

    third = iris.submit(hold_until, str(gate), resources=TPU_JOB, name="gang-2")
    reason = wait_until(lambda: third.status().get("pending_reason"), 60, "a pending reason")
    assert third.status()["state"] == "pending"
    assert reason["code"] in ("NO_CAPACITY", "WAITING_FOR_GANG"), reason
    assert set(call(cluster, "regions")) == {"us-east", "us-central", "eu-west"}
    live = {r: call(cluster, "live_reservations", key=region_key(r)) for r in regions}
    assert live == {"us-east": 1, "us-central": 1, "eu-west": 0}

    gate.touch()  # the first two finish; the third gets a whole slice and finishes too
    for job in (*first, third):
        assert sorted(job.result(timeout=180)) == ["0", "1", "2", "3"]
    assert len(_slice_of(third)) == 1
    wait_until(lambda: all(call(cluster, "live_reservations", key=region_key(r)) == 0
                           for r in regions), 60, "every reservation released")
    stats = {r: call(cluster, "stats", key=region_key(r)) for r in regions}
    assert sum(s["committed"] - before[r]["committed"] for r, s in stats.items()) == 3
    assert sum(s["released"] - before[r]["released"] for r, s in stats.items()) == 3
    # ...and /metrics' source, the controller snapshot, counts them (it lags by a poll)
    wait_until(lambda: call(cluster, "snapshot")["gang_reservations"]["committed"]
               == snapshot_before + 3, 60, "the snapshot to count three more committed")


def test_production_gang_preempts_a_batch_gang_whole_which_resumes_and_finishes(
        three_regions, tmp_path, wait_until):
    """With one slice held by a production gang and the other by a batch gang, a production
    gang takes the batch gang's slice, the whole batch gang giving it up, and the batch gang
    resumes whole when the slice frees again."""
    cluster = three_regions.cluster
    filler_gate, batch_gate, prod_gate = (tmp_path / f"{n}-go"
                                          for n in ("filler", "batch", "prod"))
    filler = iris.submit(hold_until, str(filler_gate), resources=TPU_JOB, name="filler-gang",
                         priority="production")
    try:
        wait_until(lambda: filler.status()["state"] == "running", 120, "filler running")
        batch = iris.submit(hold_until, str(batch_gate), resources=TPU_JOB,
                            name="batch-gang", priority="batch")
        wait_until(lambda: batch.status()["state"] == "running", 120, "batch running")
        assert _slice_of(batch) != _slice_of(filler)  # so no slice is free now
        prod = iris.submit(hold_until, str(prod_gate), resources=TPU_JOB,
                           name="prod-gang", priority="production")
        wait_until(lambda: prod.status()["state"] == "running", 120, "production running",
                   explain=lambda: {"prod": prod.status(), "batch": batch.tasks(),
                                    "regions": {r: call(cluster, "stats", key=region_key(r))
                                                for r in three_regions.providers},
                                    "workers": call(cluster, "list_workers")})
        # the whole batch gang gave the slice up: none of its tasks still runs
        assert {t["state"] for t in batch.tasks()} == {"pending"}
        assert filler.status()["state"] == "running"  # production does not preempt its own
        prod_gate.touch()
        batch_gate.touch()
        assert sorted(prod.result(timeout=120)) == ["0", "1", "2", "3"]
        assert sorted(batch.result(timeout=180)) == ["0", "1", "2", "3"]
        attempts = [t.get("attempts") for t in batch.tasks()]
        assert all(a == 2 for a in attempts), attempts  # each resumed once, together
    finally:
        filler_gate.touch()
        filler.wait(timeout=120)


def jax_facts() -> dict:
    return {k: os.environ.get(k) for k in ("IRIS_TASK_INDEX", "JAX_COORDINATOR_ADDRESS",
                                           "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")}


def test_tpu_gang_job_lands_whole_on_a_local_slice(three_regions):
    """A plain TPU job (no count) on local workers posing as 4-host slices: one task per
    host of one whole slice, with the JAX variables of one 4-process job."""
    from iris.controller.providers.base import SliceState

    providers = three_regions.providers
    wait_for(lambda: all(providers[r].slice_status(name).state is SliceState.READY
                         for r, name in (("us-east", "east-1"), ("us-central", "central-1"))),
             120, "both TPU slices ready")
    job = iris.submit(jax_facts, resources=iris.Resources(tpu="v5litepod-16"))
    facts = job.result(timeout=180)
    hosts = {t["worker_id"] for t in job.tasks()}
    (slice_,) = _slice_of(job)
    assert slice_ in ("east-1", "central-1")
    assert hosts == {f"{slice_}-h{i}" for i in range(4)}  # whole slice, one task each
    assert sorted(f["JAX_PROCESS_ID"] for f in facts) == ["0", "1", "2", "3"]
    assert {f["JAX_NUM_PROCESSES"] for f in facts} == {"4"}
    assert len({f["JAX_COORDINATOR_ADDRESS"] for f in facts}) == 1
