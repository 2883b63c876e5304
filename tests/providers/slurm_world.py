"""An Iris cluster whose capacity is a real Slurm cluster: the shared pieces of the Slurm
cluster-tier tests (test_slurm_cluster.py, test_slurm_faults.py, test_multi_provider.py).

`iris_on_slurm(slurm, groups, ...)` runs a local controller whose region `campus` grows and
shrinks its scale groups through a SlurmProvider on the test daemons (slurm_cluster.py):
every slice is a real allocation whose step runs `iris worker` on each node. Timings are
seconds (the autoscaler's FAST below) so a test takes tens of seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import iris
from iris.actors import tokens
from iris.actors.keys import CONTROLLER_KEY
from iris.controller.config import ClusterConfig, parse_config
from iris.controller.regions.autoscaler import AutoscalerConfig
from iris.controller.regions.region import RegionScaling
from tests.providers.conftest import slurm_provider

REGION = "campus"
FAST = AutoscalerConfig(scale_up_delay_s=0.2, scale_down_delay_s=2.0, backoff_initial_s=30.0,
                        backoff_max_s=60.0, host_lost_grace_s=2.0, poll_interval_s=0.5,
                        boot_timeout_s=120.0)
# A node's share for one slice: 1 CPU, 500 MiB (the fixture's nodes have 4 CPUs, 4000 MB).
SMALL = {"cpus_per_node": 1, "mem_per_node": "500M"}


def slurm_config(groups: dict, zones: list[str], name: str, extra_regions=None) -> ClusterConfig:
    return parse_config({
        "name": name, "controller": {"address": "tcp://127.0.0.1:7100"},
        "storage": {"log_dir": "/tmp/iris-test-logs"},
        "regions": {REGION: {"zones": zones, "slurm": {"worker_host": "127.0.0.1"},
                             "scale_groups": groups}, **(extra_regions or {})},
    })


def unique_name() -> str:
    """A cluster name no earlier test used: its jobs (kept by squeue for MinJobAge) are not
    this cluster's slices."""
    return f"s{os.getpid() % 1000}-{int(time.monotonic() * 1000) % 1000000}"


class SlurmWorld:
    """The controller (current while the `with` runs), its provider and the daemons."""

    def __init__(self, cluster, slurm, config: ClusterConfig, state: Path):
        self.cluster, self.slurm, self.config, self.state = cluster, slurm, config, state
        self.provider = None

    def snapshot(self) -> dict:
        return self.cluster.node.call(self.cluster.address, CONTROLLER_KEY,
                                      "snapshot").result(60)

    def capacity(self, region: str = REGION) -> dict:
        for report in self.snapshot().get("capacity") or []:
            if report.get("region") == region:
                return report
        return {}

    def decisions(self, region: str = REGION) -> list[dict]:
        return self.capacity(region).get("decisions", [])

    def iris_jobs(self, active: bool = True) -> list[dict]:
        """The Slurm jobs that are this cluster's slices."""
        mine = {s.slice_id for s in self.provider.list_slices()} if active else set()
        return [j for j in self.slurm.jobs() if j["name"] in mine or (
            not active and j["name"].startswith(REGION))]

    def workers(self) -> dict[str, dict]:
        rows = self.cluster.node.call(self.cluster.address, CONTROLLER_KEY,
                                      "list_workers").result(60)
        return {w["worker_id"]: w for w in rows}


@contextlib.contextmanager
def iris_on_slurm(slurm, tmp_path: Path, groups: dict, zones: list[str],
                  autoscaler: AutoscalerConfig = FAST, config: ClusterConfig | None = None,
                  more: tuple[RegionScaling, ...] = ()) -> Iterator[SlurmWorld]:
    """A controller whose region `campus` autoscales `groups` on Slurm (see module doc);
    `config` (from `slurm_config`) when other regions join it, with their scaling `more`."""
    config = config or slurm_config(groups, zones, unique_name())
    state = tmp_path / "controller"
    holder: list = []

    def provider(address: str):
        token = tokens.read(state / "controller" / tokens.CLUSTER_TOKEN_FILE).hex()
        holder.append(slurm_provider(slurm, config, address, slurm.shared, token,
                                     region=REGION))
        return holder[0]

    scaling = RegionScaling(REGION, tuple(config.regions[REGION].scale_groups.values()),
                            provider, autoscaler)
    try:
        with iris.local_cluster(state_dir=state, stop_grace_s=2.0,
                                autoscale=[scaling, *more]) as cluster:
            world = SlurmWorld(cluster, slurm, config, state)
            world.provider = holder[0] if holder else None
            yield world
            # The slices' workers dial this controller: they go before it does.
            slurm.cancel_all()
    finally:
        slurm.cancel_all()


__all__ = ["FAST", "REGION", "SMALL", "SlurmWorld", "iris_on_slurm", "slurm_config",
           "unique_name"]
