"""Several providers in one Iris cluster: a local region and a Slurm region (real daemons).

One config holds both; the scheduler and the autoscaler send each job to whichever can
serve it: GPU work only the Slurm partition has goes there; CPU work goes to the group the
config prefers (priority), and to the other provider once the preferred one cannot grow.
`iris cluster status` shows the two side by side.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import iris
from iris.controller.providers.local import LocalProvider
from iris.controller.regions.region import RegionScaling
from tests.providers.slurm_world import FAST, SMALL, iris_on_slurm, slurm_config, unique_name

SLURM_GROUPS = {
    "h100": {"provider": "slurm", "accelerator_type": "gpu", "accelerator_variant": "H100",
             "hosts_per_slice": 1, "accelerators_per_host": 2, "zones": ["gpu"],
             "max_slices": 1, "slurm": SMALL},
    "cpu-slurm": {"provider": "slurm", "accelerator_type": "cpu", "hosts_per_slice": 1,
                  "zones": ["main"], "max_slices": 1, "priority": 0, "slurm": SMALL},
}
LOCAL_REGION = {"zones": ["here"], "scale_groups": {
    "cpu-local": {"provider": "local", "accelerator_type": "cpu", "hosts_per_slice": 1,
                  "max_slices": 1, "priority": 5},  # preferred: it costs nothing
}}


def _where(job) -> str:
    """The region whose slice ran the job: slice ids (and so worker ids) start with it."""
    return job.tasks()[0]["worker_id"].split("-", 1)[0]


def test_one_cluster_runs_jobs_on_slurm_and_local_by_accelerator_and_preference(
        slurm, tmp_path, wait_until):
    config = slurm_config(SLURM_GROUPS, ["main", "gpu"], unique_name(),
                          extra_regions={"here": LOCAL_REGION})
    local_group = config.regions["here"].scale_groups["cpu-local"]
    made: list[LocalProvider] = []

    def local(address: str) -> LocalProvider:
        made.append(LocalProvider(address, tmp_path / "local-hosts", "here"))
        return made[0]

    more = (RegionScaling("here", (local_group,), local, FAST),)
    with iris_on_slurm(slurm, tmp_path, SLURM_GROUPS, ["main", "gpu"], config=config,
                       more=more) as world:
        gpu = iris.submit(lambda: __import__("os").environ["CUDA_VISIBLE_DEVICES"],
                          resources=iris.Resources(gpu="H100", count=2))
        cpu = iris.submit(lambda: "cpu", resources=iris.Resources(cpu=1))
        assert gpu.result(timeout=180) == "0,1"
        assert cpu.result(timeout=180) == "cpu"
        assert _where(gpu) == "campus"  # only the Slurm partition has H100s
        assert _where(cpu) == "here"  # both could: the preferred (priority) group ran it

        # The preferred provider cannot grow any more: CPU work goes to Slurm instead.
        made[0].set_capacity("here", 0)
        gate = tmp_path / "go"
        for s in made[0].list_slices():  # its idle slice goes, and no new one can come
            made[0].delete_slice(s.slice_id)
        from tests.cluster.tasks import hold_until
        held = iris.submit(hold_until, str(gate), resources=iris.Resources(cpu=1))
        wait_until(lambda: held.tasks()[0]["state"] == "running", 240, "the task running",
                   explain=held.status)
        assert _where(held) == "campus"
        worker = world.workers()[held.tasks()[0]["worker_id"]]
        assert worker["attributes"]["provider"] == "slurm"

        def status_rows() -> dict:
            status = json.loads(subprocess.run(
                [sys.executable, "-m", "iris", "--address", world.cluster.address, "cluster",
                 "status", "--json"], capture_output=True, text=True, timeout=120,
                check=True).stdout)
            return {(g["region"], g["group"]): g for g in status["scale_groups"]}

        rows = status_rows()
        assert {k: v["provider"] for k, v in rows.items()} == {
            ("campus", "h100"): "slurm", ("campus", "cpu-slurm"): "slurm",
            ("here", "cpu-local"): "local"}
        # Slice states come from the Region's capacity reports, which follow the provider's
        # last listing of its Slurm jobs: the slice whose worker already runs the task can
        # still be listed CREATING for a report or two (seen once in CI under load).
        for _ in range(60):
            if rows[("campus", "cpu-slurm")]["ready"] == 1:
                break
            threading.Event().wait(1.0)
            rows = status_rows()
        assert rows[("campus", "cpu-slurm")]["ready"] == 1, rows
        wait_until(lambda: any(d["action"] == "create_failed" and "no capacity" in d["reason"]
                               for d in world.decisions("here")), 60,
                   "why it did not grow there, in the decision log")
        gate.touch()
        assert held.result(timeout=120) == "0"
