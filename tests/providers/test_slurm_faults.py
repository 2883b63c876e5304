"""What the Slurm site does to running Iris work, on real daemons: an allocation cancelled
from outside, slurmctld restarted, a node drained by an admin, a preemption with GraceTime.

Each is checked where a user would notice it: the task's attempts and budgets, where it
ran, whether it ran twice at once, and what its on_preempt callback was told.
"""

from __future__ import annotations

import json

import iris
from tests.cluster.tasks import hold_until
from tests.providers.slurm_cluster import GRACE_TIME_S, KILL_WAIT_S
from tests.providers.slurm_world import SMALL, iris_on_slurm

ONE_NODE = {"node": {"provider": "slurm", "accelerator_type": "cpu", "hosts_per_slice": 1,
                     "max_slices": 2, "zones": ["main"], "slurm": SMALL}}


def _running_on(job) -> str | None:
    task = job.tasks()[0]
    return task["worker_id"] if task["state"] == "running" else None


def _slurm_job_of(world, worker_id: str) -> dict:
    attrs = world.workers()[worker_id]["attributes"]
    return next(j for j in world.slurm.jobs() if j["id"] == attrs["slurm_job_id"])


def test_scancel_from_outside_loses_the_hosts_and_requeues_the_task_once(slurm, tmp_path,
                                                                         wait_until):
    with iris_on_slurm(slurm, tmp_path, ONE_NODE, ["main"]) as world:
        gate = tmp_path / "go"
        job = iris.submit(hold_until, str(gate), resources=iris.Resources(cpu=1))
        first = wait_until(lambda: _running_on(job), 180, "the task running")
        allocation = _slurm_job_of(world, first)
        slurm.run("scancel", allocation["id"])  # the site's admin, not Iris
        second = wait_until(lambda: (_running_on(job) or first) != first and _running_on(job),
                            180, "the task running on another allocation",
                            explain=lambda: (job.status(), slurm.jobs()))
        assert _slurm_job_of(world, second)["id"] != allocation["id"]
        gate.touch()
        assert job.result(timeout=120) == "0"
        task = job.tasks()[0]
        assert (task["attempts"], task["preemptions"], task["failures"]) == (2, 1, 0)


def test_slurmctld_restart_mid_run_loses_nothing(slurm, tmp_path, wait_until):
    with iris_on_slurm(slurm, tmp_path, ONE_NODE, ["main"]) as world:
        gate = tmp_path / "go"
        job = iris.submit(hold_until, str(gate), resources=iris.Resources(cpu=1))
        worker = wait_until(lambda: _running_on(job), 180, "the task running")
        allocation = _slurm_job_of(world, worker)
        # Down long enough for several provider lists to fail (poll_interval_s 0.5 s).
        slurm.restart_ctld(down_s=3.0)
        gate.touch()
        assert job.result(timeout=120) == "0"
        task = job.tasks()[0]
        assert (task["attempts"], task["worker_id"]) == (1, worker)
        after = _slurm_job_of(world, worker)
        assert (after["id"], after["state"]) == (allocation["id"], "RUNNING")  # the same one
        assert [d["action"] for d in world.decisions()].count("create") == 1
        assert not world.capacity()["groups"][0]["slices"][0]["deleting"]


def test_drained_node_takes_no_new_work_and_its_slice_retires_when_idle(slurm, tmp_path,
                                                                        wait_until):
    with iris_on_slurm(slurm, tmp_path, ONE_NODE, ["main"]) as world:
        gate_a, gate_b = tmp_path / "a", tmp_path / "b"
        first = iris.submit(hold_until, str(gate_a), resources=iris.Resources(cpu=1))
        worker = wait_until(lambda: _running_on(first), 180, "the first task running")
        node = world.workers()[worker]["attributes"]["slurm_node"]
        retired = _slurm_job_of(world, worker)["id"]
        slurm.drain(node, "bad dimm")
        wait_until(lambda: any(d["action"] == "delete" and "bad dimm" in d["reason"]
                               for d in world.decisions()), 60, "the slice retired")
        second = iris.submit(hold_until, str(gate_b), resources=iris.Resources(cpu=1))
        other = wait_until(lambda: _running_on(second), 180, "the second task running",
                           explain=lambda: (second.status(), slurm.jobs()))
        assert other != worker  # not on the drained node's worker: on a new allocation
        assert world.workers()[other]["attributes"]["slurm_node"] != node
        assert _running_on(first) == worker  # the running task was left alone
        gate_a.touch()
        assert first.result(timeout=120) == "0"
        # Idle now: the retired allocation is cancelled; the node stays drained for the admin.
        wait_until(lambda: next(j for j in slurm.jobs() if j["id"] == retired)["state"]
                   not in ("RUNNING", "COMPLETING"), 60, "the retired allocation cancelled")
        assert slurm.node_states()[node] == "drained"
        gate_b.touch()
        assert second.result(timeout=120) == "0"
        assert first.tasks()[0]["attempts"] == 1


def _checkpointing(path) -> str:
    """Record every attempt's start and what on_preempt was told; hold until `path`/go."""
    import os
    import time

    import iris.worker.task_runtime as rt

    attempt = os.environ["IRIS_ATTEMPT_ID"]
    log = path / "log.jsonl"

    def write(**fields) -> None:
        with open(log, "a") as f:
            f.write(json.dumps({"attempt": attempt, "at": time.time(), **fields}) + "\n")

    rt.on_preempt(lambda notice: write(event="preempt", reason=notice and notice.reason,
                                       deadline=notice and notice.deadline))
    write(event="start")
    hold_until(str(path / "go"))
    write(event="end")
    return attempt


def test_slurm_preemption_with_grace_time_reaches_on_preempt_and_requeues_once(
        slurm, tmp_path, wait_until):
    # Partition gpu has GraceTime; a job in `high` (higher priority tier) preempts its jobs.
    groups = {"node": {"provider": "slurm", "accelerator_type": "cpu", "hosts_per_slice": 1,
                       "max_slices": 2, "zones": ["gpu"], "slurm": SMALL}}
    with iris_on_slurm(slurm, tmp_path, groups, ["gpu"]) as world:
        job = iris.submit(_checkpointing, tmp_path, resources=iris.Resources(cpu=1))
        wait_until(lambda: _running_on(job), 180, "the task running")
        wait_until(lambda: (tmp_path / "log.jsonl").exists(), 180, "the task started")
        big = slurm.sbatch("-p", "high", "-N", "2", "--exclusive", "-w", "n[1-2]")
        events = lambda: [json.loads(line) for line in  # noqa: E731
                          (tmp_path / "log.jsonl").read_text().splitlines()]
        preempt = wait_until(lambda: next((e for e in events() if e["event"] == "preempt"),
                                          None), 120, "on_preempt called",
                             explain=lambda: (events(), slurm.jobs()))
        assert "Slurm preempted job" in preempt["reason"]
        # Slurm kills at PreemptTime + GraceTime + KillWait: the notice says so (+-2 s).
        assert abs(preempt["deadline"] - preempt["at"] - (GRACE_TIME_S + KILL_WAIT_S)) < 2.0
        wait_until(lambda: job.tasks()[0]["preemptions"] == 1, 60, "the preemption counted")
        slurm.run("scancel", big)  # the nodes come back: Iris makes a new allocation
        (tmp_path / "go").touch()
        assert job.result(timeout=180) != ""
        task = job.tasks()[0]
        assert (task["attempts"], task["preemptions"], task["failures"]) == (2, 1, 0)
        starts = [e for e in events() if e["event"] == "start"]
        first_end = max(e["at"] for e in events() if e["attempt"] == starts[0]["attempt"])
        assert len(starts) == 2 and starts[1]["at"] >= first_end  # never two at once
        assert world.decisions()
