"""Gang jobs through the controller's Region actors: three regions of real worker processes.

us-east and us-central each have one 4-host v5litepod-16 slice (LocalProvider processes that
register with the region, zone and slice attributes a TPU VM has); eu-west has only a CPU
host. A 4-host gang job must land whole on one slice, two of them in different regions, a
third wait with a reason until a slice frees, and the reservations must all end released.
"""

from __future__ import annotations

import pytest

import iris
from iris.actors.keys import CONTROLLER_KEY, region_key
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.local import LocalProvider
from tests.cluster.tasks import hold_until

TPU = {"accelerator_type": "v5litepod-16", "accelerator_count": "4"}
TPU_JOB = iris.Resources(tpu="v5litepod-16", cpu=1)


def _tpu_group(region: str) -> ScaleGroupConfig:
    return ScaleGroupConfig("v5e-16", region, "tpu", "v5litepod-16", 4, 4, (f"{region}-a",))


def _call(cluster, method, *args, key=CONTROLLER_KEY):
    return cluster.node.call(cluster.address, key, method, args).result(60)


@pytest.fixture
def three_regions(tmp_path, wait_until):
    with iris.local_cluster(state_dir=tmp_path / "c", worker_attrs=TPU,
                            stop_grace_s=2.0) as cluster:
        providers = {r: LocalProvider(cluster.address, tmp_path / r, r)
                     for r in ("us-east", "us-central", "eu-west")}
        try:
            providers["us-east"].create_slice(_tpu_group("us-east"), "us-east-a", "east-1")
            providers["us-central"].create_slice(_tpu_group("us-central"), "us-central-a",
                                                 "central-1")
            cpu = ScaleGroupConfig("cpu", "eu-west", "cpu", None, 1, 0, ("eu-west-a",))
            providers["eu-west"].create_slice(cpu, "eu-west-a", "west-1")
            wait_until(lambda: len(_call(cluster, "list_workers")) == 9, 180,
                       "nine workers in three regions to register")
            yield cluster
        finally:
            for provider in providers.values():
                provider.close()


def _slice_of(job) -> set[str]:
    return {t["worker_id"].rsplit("-h", 1)[0] for t in job.tasks()}


def test_gang_jobs_land_whole_in_one_region_each_and_a_third_waits_for_a_slice(
        three_regions, tmp_path, wait_until):
    cluster = three_regions
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
    regions = _call(cluster, "regions")
    assert set(regions) == {"us-east", "us-central", "eu-west"}
    live = {r: _call(cluster, "live_reservations", key=region_key(r)) for r in regions}
    assert live == {"us-east": 1, "us-central": 1, "eu-west": 0}

    gate.touch()  # the first two finish; the third gets a whole slice and finishes too
    for job in (*first, third):
        assert sorted(job.result(timeout=180)) == ["0", "1", "2", "3"]
    assert len(_slice_of(third)) == 1
    wait_until(lambda: all(_call(cluster, "live_reservations", key=region_key(r)) == 0
                           for r in regions), 60, "every reservation released")
    stats = {r: _call(cluster, "stats", key=region_key(r)) for r in regions}
    assert sum(s["committed"] for s in stats.values()) == 3
    assert sum(s["released"] for s in stats.values()) == 3
    # ...and /metrics' source, the controller snapshot, counts them (it lags by a poll)
    wait_until(lambda: _call(cluster, "snapshot")["gang_reservations"]["committed"] == 3, 60,
               "the snapshot to count three committed reservations")


def test_production_gang_preempts_a_batch_gang_whole_which_resumes_and_finishes(
        tmp_path, wait_until):
    with iris.local_cluster(state_dir=tmp_path / "c", worker_attrs=TPU,
                            stop_grace_s=2.0) as cluster:
        provider = LocalProvider(cluster.address, tmp_path / "hosts", "us-central")
        try:
            provider.create_slice(_tpu_group("us-central"), "us-central-a", "central-1")
            wait_until(lambda: len(_call(cluster, "list_workers")) == 4, 180, "4 workers")
            batch_gate, prod_gate = tmp_path / "batch-go", tmp_path / "prod-go"
            batch = iris.submit(hold_until, str(batch_gate), resources=TPU_JOB,
                                name="batch-gang", priority="batch")
            wait_until(lambda: batch.status()["state"] == "running", 120, "batch running")
            prod = iris.submit(hold_until, str(prod_gate), resources=TPU_JOB,
                               name="prod-gang", priority="production")
            wait_until(lambda: prod.status()["state"] == "running", 120, "production running",
                       explain=lambda: {"prod": prod.status(), "batch": batch.tasks(),
                                        "region": _call(cluster, "stats",
                                                        key=region_key("us-central")),
                                        "workers": _call(cluster, "list_workers")})
            # the whole batch gang gave the slice up: none of its tasks still runs
            assert {t["state"] for t in batch.tasks()} == {"pending"}
            prod_gate.touch()
            batch_gate.touch()
            assert sorted(prod.result(timeout=120)) == ["0", "1", "2", "3"]
            assert sorted(batch.result(timeout=180)) == ["0", "1", "2", "3"]
            attempts = [t.get("attempts") for t in batch.tasks()]
            assert all(a == 2 for a in attempts), attempts  # each resumed once, together
        finally:
            provider.close()
