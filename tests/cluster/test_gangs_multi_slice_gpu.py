"""Multi-slice TPU gangs and GPU gangs on real worker processes (issue 20).

A 2-slice gang of v4-16 (2 hosts a slice) must land whole on the one region that has two
free slices, not split with the region that has one, and every task must be told its slice
and the multi-slice coordinates. A GPU gang on local workers advertising fake H100s gets a
torch rank each, and tasks sharing a host never share a GPU.
"""

from __future__ import annotations

import pytest

import iris
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.local import LocalProvider
from tests.cluster.controller_state import call, regions_free
from tests.cluster.tasks import gang_env
from tests.conftest import wait_for

V4 = {"accelerator_type": "v4-16", "accelerator_count": "4"}





@pytest.fixture(scope="module")
def _two_region_cluster(tmp_path_factory):
    """us-east: two v4-16 slices; us-central: one. Six worker processes, shared by the
    module's two tests (each waits for the slices it needs to be free, see two_regions)."""
    root = tmp_path_factory.mktemp("two-regions")
    with iris.local_cluster(state_dir=root / "c", worker_attrs=V4,
                            stop_grace_s=2.0) as cluster:
        providers = {r: LocalProvider(cluster.address, root / r, r)
                     for r in ("us-east", "us-central")}
        try:
            for region, slices in (("us-east", 2), ("us-central", 1)):
                group = ScaleGroupConfig("v4-16", region, "tpu", "v4-16", 2, 4, (f"{region}-a",),
                                         max_slices=2)
                for i in range(slices):
                    providers[region].create_slice(group, f"{region}-a", f"{region}-{i}")
            wait_for(lambda: len(call(cluster, "list_workers")) == 6
                     and regions_free(cluster, providers), 180,
                     "six workers in two regions to register, and the regions' actors")
            yield cluster
        finally:
            for provider in providers.values():
                provider.close()


@pytest.fixture
def two_regions(_two_region_cluster):
    """The shared cluster, current for this test, once no gang an earlier test ran holds a
    slice (its reservation released), so each test starts with all three slices free."""
    from iris.actors.current import current_context

    cluster = _two_region_cluster
    wait_for(lambda: regions_free(cluster, ("us-east", "us-central")), 120,
             "the slices of earlier tests' gangs released")
    token = current_context.set(cluster)
    yield cluster
    current_context.reset(token)


def test_two_slice_gang_lands_whole_in_one_region_and_each_task_knows_its_slice(
        two_regions, tmp_path):
    gate = tmp_path / "go"
    gate.touch()  # nothing to wait for: each task reports its variables and ends
    job = iris.submit(gang_env, str(gate), name="multislice",
                      resources=iris.Resources(tpu="v4-16", count=2, cpu=0.5))
    envs = job.result(timeout=240)
    assert len(envs) == 4
    workers = {t["index"]: t["worker_id"] for t in job.tasks()}
    assert {w.rsplit("-h", 1)[0] for w in workers.values()} == {"us-east-0", "us-east-1"}
    by_index = sorted(envs, key=lambda e: int(e["IRIS_TASK_INDEX"]))
    slice_of = [workers[i].rsplit("-h", 1)[0] for i in range(4)]
    assert slice_of[0] == slice_of[1] != slice_of[2] == slice_of[3]  # slice by slice
    assert [e["MEGASCALE_SLICE_ID"] for e in by_index] == ["0", "0", "1", "1"]
    assert [e["TPU_WORKER_ID"] for e in by_index] == ["0", "1", "0", "1"]
    assert [e["JAX_PROCESS_ID"] for e in by_index] == ["0", "1", "2", "3"]
    assert {e["MEGASCALE_NUM_SLICES"] for e in by_index} == {"2"}
    assert {e["JAX_NUM_PROCESSES"] for e in by_index} == {"4"}
    assert len({e["MEGASCALE_COORDINATOR_ADDRESS"] for e in by_index}) == 1
    assert len({e["JAX_COORDINATOR_ADDRESS"] for e in by_index}) == 1
    assert all(len(e["TPU_WORKER_HOSTNAMES"].split(",")) == 2 for e in by_index)
    assert not any("CUDA_VISIBLE_DEVICES" in e or "RANK" in e for e in by_index)


def test_two_slice_gang_with_one_free_slice_per_region_waits_and_says_why(
        two_regions, tmp_path, wait_until):
    gate = tmp_path / "go"
    blocker = iris.submit(gang_env, str(gate), name="one-slice",
                          resources=iris.Resources(tpu="v4-16", cpu=0.5))
    wait_until(lambda: blocker.status()["state"] == "running", 120, "the one-slice gang runs")
    job = iris.submit(gang_env, str(gate), name="two-slices",
                      resources=iris.Resources(tpu="v4-16", count=2, cpu=0.5))
    reason = wait_until(lambda: (job.status().get("pending_reason") or {}).get("message"),
                        60, "a pending reason")
    assert job.status()["state"] == "pending"
    assert "needs 2 whole v4-16 slices in one region" in reason, reason
    assert "has 1 free" in reason, reason
    gate.touch()
    assert len(blocker.result(timeout=180)) == 2
    assert len(job.result(timeout=240)) == 4  # the freed slice completes a region's pair


def test_gpu_gang_gets_ranks_and_no_two_tasks_on_a_host_share_a_gpu(tmp_path, wait_until):
    gate = tmp_path / "go"
    attrs = {"accelerator_type": "H100", "accelerator_count": "4", "pool": "a3"}
    with iris.local_cluster(workers=2, worker_cpu=4, worker_attrs=attrs,
                            state_dir=tmp_path / "c", stop_grace_s=2.0):
        gang = iris.submit(gang_env, str(gate), name="ddp",
                           resources=iris.Resources(gpu="H100", count=2, hosts=2, cpu=1))
        wait_until(lambda: gang.status()["state"] == "running", 120, "the GPU gang runs")
        # Two GPUs left on each host: a plain 2-GPU job fits once per host, beside the gang.
        plain = iris.submit(gang_env, str(gate), name="plain", replicas=2,
                            resources=iris.Resources(gpu="H100", count=2, cpu=1))
        wait_until(lambda: plain.status()["state"] == "running", 120, "the plain job runs")
        gate.touch()
        gang_envs, plain_envs = gang.result(timeout=180), plain.result(timeout=180)
        gang_hosts = {t["index"]: t["worker_id"] for t in gang.tasks()}
        plain_hosts = {t["index"]: t["worker_id"] for t in plain.tasks()}
    assert len(set(gang_hosts.values())) == 2  # one task per host
    ranked = sorted(gang_envs, key=lambda e: int(e["IRIS_TASK_INDEX"]))
    assert [e["RANK"] for e in ranked] == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in ranked} == {"2"}
    assert {e["LOCAL_RANK"] for e in ranked} == {"0"}
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in ranked}) == 1
    devices: dict[str, list[str]] = {}
    for envs, hosts in ((gang_envs, gang_hosts), (plain_envs, plain_hosts)):
        for e in envs:
            given = e["CUDA_VISIBLE_DEVICES"].split(",")
            assert len(given) == 2
            devices.setdefault(hosts[int(e["IRIS_TASK_INDEX"])], []).extend(given)
    assert sorted(devices) == sorted(set(gang_hosts.values()))
    for host, given in devices.items():
        assert sorted(given) == ["0", "1", "2", "3"], (host, given)  # disjoint, all used
