"""Provider fixtures: a test cluster config, the fake TPU server, and one harness per Provider.

Adding an implementation to the contract suite is one builder in `_HARNESSES`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from iris.base.clock import FakeClock
from iris.controller.config import ClusterConfig, parse_config
from iris.controller.providers.base import Provider
from iris.controller.providers.gcp_tpu import GcpTpuProvider, make_tpu_client
from iris.controller.providers.simulated import SimulatedProvider
from tests.providers.fake_tpu_server import FakeTpuServer

REGION = "us-central2"
ZONE_A, ZONE_B = "us-central2-a", "us-central2-b"
# Fast LRO polling: the client's default starts at 1 s and would make each create slow.
FAST_GCP = {"poll_initial_s": 0.01, "poll_max_s": 0.05, "create_timeout_s": 30.0,
            "delete_timeout_s": 30.0}


def cluster_config(name: str = "test") -> ClusterConfig:
    return parse_config({
        "name": name,
        "controller": {"address": "tcp://10.1.2.3:7100"},
        "storage": {"log_bucket": "iris-test-logs"},
        "gcp": {"project": "test-proj", "service_account": "iris@test-proj.iam",
                "iris_package": "iris==0.1.0"},
        "regions": {REGION: {"zones": [ZONE_A, ZONE_B], "scale_groups": {
            "v5e-16": {"accelerator_type": "tpu", "accelerator_variant": "v5litepod-16",
                       "max_slices": 8, "preemptible": True},
            "v4-8": {"accelerator_type": "tpu", "accelerator_variant": "v4-8",
                     "zones": [ZONE_B], "max_slices": 8, "spot": True},
            "cpu": {"accelerator_type": "cpu", "hosts_per_slice": 2},
        }}},
    })


@dataclass
class ProviderHarness:
    """A provider plus the levers a test needs to act on its world from outside."""

    kind: str
    provider: Provider
    config: ClusterConfig
    preempt: Callable[[str], None]  # the cloud takes a slice back
    stock_out: Callable[[str], None]  # a zone has no capacity left
    settle: Callable[[], None]  # let booting slices finish booting


@contextlib.contextmanager
def _simulated() -> Iterator[ProviderHarness]:
    clock = FakeClock()
    provider = SimulatedProvider(clock, boot_delay_s=60.0)
    yield ProviderHarness("simulated", provider, cluster_config(), provider.preempt,
                          lambda zone: provider.set_capacity(zone, 0),
                          lambda: clock.advance(120.0))
    provider.close()


@contextlib.contextmanager
def _gcp_tpu() -> Iterator[ProviderHarness]:
    with FakeTpuServer() as server:
        config = cluster_config()
        provider = GcpTpuProvider.from_config(config, REGION, client=make_tpu_client(server.url),
                                              **FAST_GCP)
        yield ProviderHarness("gcp_tpu", provider, config, server.preempt, server.stock_out,
                              lambda: None)
        provider.close()


@contextlib.contextmanager
def _local() -> Iterator[ProviderHarness]:
    """Real worker processes registering with a real controller on 127.0.0.1 (never the
    config's controller address, which is not on this machine)."""
    import tempfile

    import iris
    from iris.controller.providers.local import LocalProvider

    with tempfile.TemporaryDirectory(prefix="iris-local-provider-") as root, \
            iris.local_cluster() as cluster:
        provider = LocalProvider(cluster.address, Path(root), REGION)
        yield ProviderHarness("local", provider, cluster_config(), provider.preempt,
                              lambda zone: provider.set_capacity(zone, 0), lambda: None)
        provider.close()


_HARNESSES = {"simulated": _simulated, "gcp_tpu": _gcp_tpu, "local": _local}


@pytest.fixture(params=sorted(_HARNESSES))
def harness(request) -> Iterator[ProviderHarness]:
    with _HARNESSES[request.param]() as built:
        yield built


@pytest.fixture
def fake_tpu() -> Iterator[FakeTpuServer]:
    with FakeTpuServer() as server:
        yield server


@pytest.fixture
def gcp_provider(fake_tpu: FakeTpuServer) -> Iterator[GcpTpuProvider]:
    provider = GcpTpuProvider.from_config(cluster_config(), REGION,
                                          client=make_tpu_client(fake_tpu.url), **FAST_GCP)
    yield provider
    provider.close()
