"""One provider for one region of a cluster config, by its groups' kind. Not the providers.

The controller (main.py) makes each region's provider here once it knows its own address;
operator tools that act on slices (`iris slice ...`) can make the same ones, so a slice
they list or make is the autoscaler's. Imports are lazy: a controller without Kubernetes
groups never imports the kubernetes client.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from iris.base.errors import ConfigError
from iris.controller.config import PROVIDER_KINDS, ClusterConfig


def region_kind(cluster: ClusterConfig, region: str) -> str:
    """The provider kind of `region`'s groups (one per region: load_config checks)."""
    found = cluster.regions.get(region)
    kinds = sorted({g.provider for g in found.scale_groups.values()}) if found else []
    if not kinds:
        raise ConfigError(f"regions.{region}: no such region with scale groups")
    return kinds[0]


def make_provider(cluster: ClusterConfig, region: str, *, controller_address: str,
                  cluster_token: str = "", local_root: Path | None = None) -> Any:
    """The Provider for `region`. Workers dial the config's controller.address, or
    `controller_address` (the bound one) when the config says port 0. `cluster_token` (hex)
    reaches workers on other hosts (gcp, slurm, kubernetes); `local_root` is where local
    workers keep their dirs."""
    kind = region_kind(cluster, region)
    if cluster.controller.address.endswith(":0"):  # "wherever it binds": what it bound
        cluster = replace(cluster, controller=replace(cluster.controller,
                                                      address=controller_address))
    if kind == "local":
        from iris.controller.providers.local import LocalProvider
        return LocalProvider(controller_address, Path(local_root or "iris-hosts") / region,
                             region)
    if kind == "simulated":
        from iris.base.clock import SYSTEM_CLOCK
        from iris.controller.providers.simulated import SimulatedProvider
        return SimulatedProvider(SYSTEM_CLOCK)
    if kind == "slurm":
        from iris.controller.providers.slurm import SlurmProvider
        return SlurmProvider.from_config(cluster, region, cluster_token=cluster_token)
    if kind == "kubernetes":
        from iris.controller.providers.kubernetes import KubernetesProvider
        return KubernetesProvider.from_config(cluster, region, cluster_token=cluster_token)
    if kind == "gcp":
        from iris.controller.providers.gcp_tpu import GcpTpuProvider
        return GcpTpuProvider.from_config(cluster, region, cluster_token=cluster_token)
    raise ConfigError(f"regions.{region}: unknown provider {kind!r} "
                      f"(known: {', '.join(PROVIDER_KINDS)})")


__all__ = ["make_provider", "region_kind"]
