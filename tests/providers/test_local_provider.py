"""LocalProvider's hosts are processes of one machine: they share one task environment
cache, as a Slurm node's workers do, so a venv is built once, not at each host's first task."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import iris
from iris.controller.providers.base import SliceState
from iris.controller.providers.local import LocalProvider
from tests.cli.test_local_cluster import venv_once_all_run
from tests.conftest import ENV_CACHE
from tests.providers.conftest import REGION, ZONE_A, cluster_config

_READY_S = 120.0


def _ready(provider: LocalProvider, slice_id: str) -> bool:
    gate = threading.Event()
    for _ in range(int(_READY_S / 0.05)):
        if provider.slice_status(slice_id).state is SliceState.READY:
            return True
        gate.wait(0.05)
    return False


def test_local_slice_hosts_share_one_env_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_CACHE, raising=False)  # the provider's own, not the suite's
    barrier, hosts = tmp_path / "barrier", tmp_path / "hosts"
    barrier.mkdir()
    whole_host = iris.Resources(cpu=len(os.sched_getaffinity(0)))  # one task per host
    with iris.local_cluster() as cluster:
        provider = LocalProvider(cluster.address, hosts, REGION)
        try:
            provider.create_slice(cluster_config().scale_group("cpu"), ZONE_A, "cpu-1")
            assert _ready(provider, "cpu-1"), provider.slice_status("cpu-1")
            job = iris.submit(venv_once_all_run, str(barrier), 2, replicas=2,
                              resources=whole_host)
            prefixes = job.result(timeout=300)
            assert {t["worker_id"] for t in job.tasks()} == {"cpu-1-h0", "cpu-1-h1"}
        finally:
            provider.close()
    assert len(set(prefixes)) == 1, prefixes
    assert Path(prefixes[0]).parent == (hosts / ".envs").resolve()
    assert not list(hosts.glob("cpu-1/*/envs"))
