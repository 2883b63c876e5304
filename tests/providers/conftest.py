"""Provider fixtures: a test cluster config, the fake TPU server, and one harness per Provider.

Adding an implementation to the contract suite is one builder in `_HARNESSES`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
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


_SLURM_RUNS = itertools.count(1)
# What this machine's uv and pip need to reach PyPI through its TLS proxy: the allocations
# get them as a site's would (slurm.export_env), the rest of the test's environment not.
_CERT_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "REQUESTS_CA_BUNDLE",
              "PIP_FIND_LINKS", "PIP_INDEX_URL", "UV_INDEX_URL", "UV_CACHE_DIR", "HTTPS_PROXY",
              "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


def slurm_contract_config(name: str = "test") -> ClusterConfig:
    """The contract's groups as Slurm groups (cpu nodes: Slurm has no TPUs); zones are the
    fixture's partitions za and zb, named apart through `partitions`."""
    return parse_config({
        "name": name, "controller": {"address": "tcp://127.0.0.1:7100"},
        "storage": {"log_dir": "/tmp/iris-test-logs"},
        "regions": {REGION: {"zones": [ZONE_A, ZONE_B],
                             "slurm": {"partitions": {ZONE_A: "za", ZONE_B: "zb"},
                                       "worker_host": "127.0.0.1"},
                             "scale_groups": {
            "v5e-16": {"provider": "slurm", "accelerator_type": "cpu", "hosts_per_slice": 4,
                       "max_slices": 8},
            "v4-8": {"provider": "slurm", "accelerator_type": "cpu", "hosts_per_slice": 1,
                     "zones": [ZONE_B], "max_slices": 8},
        }}},
    })


@contextlib.contextmanager
def _slurm(request) -> Iterator[ProviderHarness]:
    """Real Slurm daemons (slurm_cluster.py); the workers the allocations start register
    with a real controller on 127.0.0.1."""
    import tempfile

    import iris
    from iris.actors import tokens

    slurm = request.getfixturevalue("slurm")
    with tempfile.TemporaryDirectory(prefix="iris-slurm-provider-") as root, \
            iris.local_cluster(state_dir=Path(root) / "c") as cluster:
        # A cluster name of its own: jobs earlier tests ended stay in squeue (MinJobAge)
        # and must not count as this cluster's slices, as another cluster's would not.
        config = slurm_contract_config(f"t{next(_SLURM_RUNS)}")
        token = tokens.read(Path(root) / "c" / "controller" / tokens.CLUSTER_TOKEN_FILE).hex()
        provider = slurm_provider(slurm, config, cluster.address, slurm.shared, token)
        part = {ZONE_A: "za", ZONE_B: "zb"}
        yield ProviderHarness(
            "slurm", provider, config,
            lambda slice_id: slurm.run("scancel", "--name", slice_id),  # the site takes it
            lambda zone: slurm.set_partition(part[zone], State="INACTIVE"), lambda: None)
        provider.close()
        slurm.cancel_all()  # its workers dial this cluster: they go before it does


def slurm_provider(slurm, config: ClusterConfig, address: str, work_dir: Path, token: str,
                   region: str = REGION):
    """A SlurmProvider for `region` of `config` on the test cluster `slurm`."""
    import dataclasses

    from iris.controller.providers.slurm import SlurmProvider

    site = dataclasses.replace(config.regions[region].slurm, conf=str(slurm.conf),
                               work_dir=str(work_dir), worker_host="127.0.0.1",
                               export_env=tuple(v for v in _CERT_VARS if v in os.environ))
    config = dataclasses.replace(config, regions={
        **config.regions, region: dataclasses.replace(config.regions[region], slurm=site)})
    controller = dataclasses.replace(config.controller, address=address)
    return SlurmProvider.from_config(dataclasses.replace(config, controller=controller),
                                     region, cluster_token=token)


def k8s_contract_config(name: str = "test") -> ClusterConfig:
    """The contract's groups as Kubernetes groups: TPU node pools on GKE, gang-admitted
    through Kueue LocalQueues."""
    return parse_config({
        "name": name, "controller": {"address": "tcp://10.1.2.3:7100"},
        "storage": {"log_bucket": "iris-test-logs"},
        "regions": {REGION: {"zones": [ZONE_A, ZONE_B],
                             "kubernetes": {"namespace": "iris", "image": "iris:0.1.0",
                                            "iris_package": ""},
                             "scale_groups": {
            "v5e-16": {"provider": "kubernetes", "accelerator_type": "tpu",
                       "accelerator_variant": "v5litepod-16", "max_slices": 8,
                       "kubernetes": {"local_queue": "tpu", "cpu": "8", "memory": "32Gi"}},
            "v4-8": {"provider": "kubernetes", "accelerator_type": "tpu",
                     "accelerator_variant": "v4-8", "zones": [ZONE_B], "max_slices": 8,
                     "kubernetes": {"local_queue": "tpu"}},
            "cpu": {"provider": "kubernetes", "accelerator_type": "cpu", "hosts_per_slice": 2},
        }}},
    })


@contextlib.contextmanager
def _kubernetes() -> Iterator[ProviderHarness]:
    from iris.controller.providers.kubernetes import KubernetesProvider, make_api_client
    from tests.providers.fake_k8s_server import FakeKubernetes

    with FakeKubernetes() as server:
        server.set_quota("tpu", 64)
        config = k8s_contract_config()
        site = config.regions[REGION].kubernetes
        provider = KubernetesProvider.from_config(config, REGION, cluster_token="ab" * 32,
                                                  api_client=make_api_client(site, server.url))
        yield ProviderHarness("kubernetes", provider, config, server.preempt,
                              server.stock_out, server.run_pods)
        provider.close()


_HARNESSES = {"simulated": _simulated, "gcp_tpu": _gcp_tpu, "local": _local, "slurm": _slurm,
              "kubernetes": _kubernetes}


@pytest.fixture(params=sorted(_HARNESSES))
def harness(request) -> Iterator[ProviderHarness]:
    builder = _HARNESSES[request.param]
    with builder(request) if request.param == "slurm" else builder() as built:
        yield built


def pytest_collection_modifyitems(items) -> None:
    """Every test on the real Slurm daemons runs in one xdist worker (scripts/test.sh passes
    --dist loadgroup), so one Slurm cluster serves them all."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "slurm" in getattr(item, "fixturenames", ()) or params.get("harness") == "slurm":
            item.add_marker(pytest.mark.xdist_group("slurm"))


@pytest.fixture(scope="session")
def slurm_daemons() -> Iterator:
    """One real Slurm cluster per test process (slurm_cluster.py), started on first use."""
    from tests.conftest import shared_process_env
    from tests.providers.slurm_cluster import SlurmCluster, slurm_installed

    if not slurm_installed():
        pytest.skip("Slurm is not installed (scripts/test.sh installs slurm-wlm and munge)")
    cluster = SlurmCluster(env=shared_process_env()).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm(slurm_daemons) -> Iterator:
    """The shared Slurm cluster, with every job cancelled, every node idle and resumed and
    the partitions as configured once the test is done."""
    yield slurm_daemons
    slurm_daemons.cancel_all()


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
