"""Iris autoscaling on real Slurm daemons: demand becomes allocations, idleness cancels them,
a GPU gang is one allocation whose tasks get Slurm's own devices, and an allocation Slurm
will never run is a reason, not a hang.

Every slice here is a real Slurm job (sbatch on the four-node test cluster of
slurm_cluster.py) whose step runs `iris worker` on each node; the workers register with a
real controller on 127.0.0.1.
"""

from __future__ import annotations

import iris
from tests.cluster.tasks import hold_until
from tests.providers.slurm_cluster import NODES
from tests.providers.slurm_world import SMALL, iris_on_slurm


def test_slurm_autoscales_zero_to_four_nodes_and_back_to_zero_when_idle(slurm, tmp_path,
                                                                        wait_until):
    groups = {"node": {"provider": "slurm", "accelerator_type": "cpu", "hosts_per_slice": 1,
                       "max_slices": 4, "zones": ["main"], "slurm": {"exclusive": True}}}
    with iris_on_slurm(slurm, tmp_path, groups, ["main"]) as world:
        assert world.iris_jobs() == []  # min_slices 0: nothing asked of Slurm before work
        gate = tmp_path / "go"
        # A whole node each (an exclusive allocation offers its 4 CPUs): four allocations.
        job = iris.submit(hold_until, str(gate), replicas=4, resources=iris.Resources(cpu=4))
        wait_until(lambda: [t["state"] for t in job.tasks()] == ["running"] * 4, 180,
                   "four tasks running", explain=lambda: (job.status(), slurm.jobs()))
        running = [j for j in world.iris_jobs() if j["state"] == "RUNNING"]
        assert sorted(j["nodes"] for j in running) == sorted(NODES)  # one node each
        workers = world.workers()
        assert {workers[t["worker_id"]]["attributes"]["slurm_node"]
                for t in job.tasks()} == set(NODES)
        gate.touch()
        assert sorted(job.result(timeout=120)) == ["0", "1", "2", "3"]
        wait_until(lambda: not slurm.active_jobs(), 120, "every allocation cancelled when idle")
        wait_until(lambda: slurm.idle_nodes() == set(NODES), 60, "every node idle again")
        # The capacity report (the dashboard's) lags by a stats poll: wait for it to say so.
        actions = wait_until(lambda: (a := [d["action"] for d in world.decisions()]).count(
            "delete") == 4 and a, 60, "four deletes in the decision log")
        assert actions.count("create") == 4


def _report(path, name: str) -> str:
    """Record this task's devices, wait for the whole gang to have started, return them."""
    import os
    import time

    index = os.environ["IRIS_TASK_INDEX"]
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    (path / f"{name}-{index}").write_text(devices)
    deadline = time.monotonic() + 120
    while len(list(path.glob(f"{name}-*"))) < int(os.environ["IRIS_NUM_TASKS"]):
        if time.monotonic() > deadline:
            raise TimeoutError("the rest of the gang never started")
        time.sleep(0.05)
    return devices


def test_slurm_gpu_gang_is_one_allocation_and_tasks_get_slurm_devices(slurm, tmp_path,
                                                                      wait_until):
    # Another user holds GPUs 0-3 of both gpu-partition nodes: Slurm gives Iris the others.
    other = slurm.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:4", "--mem=100M")
    wait_until(lambda: any(j["id"] == other and j["state"] == "RUNNING"
                           for j in slurm.jobs()), 60, "the other user's job running")
    groups = {"h100": {"provider": "slurm", "accelerator_type": "gpu",
                       "accelerator_variant": "H100", "hosts_per_slice": 2,
                       "accelerators_per_host": 4, "zones": ["gpu"], "slurm": SMALL}}
    with iris_on_slurm(slurm, tmp_path, groups, ["gpu"]) as world:
        job = iris.submit(_report, tmp_path, "gang",
                          resources=iris.Resources(gpu="H100", count=4, hosts=2))
        devices = job.result(timeout=180)
        assert devices == ["4,5,6,7", "4,5,6,7"]  # its own GPUs on each node, not 0-3
        allocations = world.iris_jobs()
        assert len(allocations) == 1 and allocations[0]["nodes"] == "n[1-2]"
        workers = world.workers()
        assert {workers[t["worker_id"]]["attributes"]["slurm_job_id"]
                for t in job.tasks()} == {allocations[0]["id"]}


def test_slurm_allocation_that_slurm_will_never_run_is_a_reason_not_a_hang(slurm, tmp_path,
                                                                           wait_until):
    # Partition `small` allows one node per job; the group asks two.
    groups = {"pair": {"provider": "slurm", "accelerator_type": "gpu",
                       "accelerator_variant": "H100", "hosts_per_slice": 2,
                       "accelerators_per_host": 4, "zones": ["small"], "slurm": SMALL}}
    with iris_on_slurm(slurm, tmp_path, groups, ["small"]) as world:
        job = iris.submit(lambda: "never", resources=iris.Resources(gpu="H100", count=4,
                                                                     hosts=2))
        reason = wait_until(
            lambda: "Slurm will never run" in job.status().get("pending_reason", {}).get(
                "message", "") and job.status()["pending_reason"]["message"], 120,
            "the refusal in the job's pending reason", explain=job.status)
        assert "PartitionConfig" in reason or "PartitionNodeLimit" in reason
        assert "partition small" in reason
        failed = [d for d in world.decisions() if d["action"] == "create_failed"]
        assert failed and "Slurm will never run" in failed[0]["reason"]
        assert not slurm.active_jobs()  # the refused job was cancelled, nothing left queued
        job.kill()
