"""KubernetesProvider: the official client against the fake API server with Kueue
(fake_k8s_server.py). What a slice is made of (one indexed Job, the gang admitted whole,
GPU/TPU requests and GKE selectors, the token in a Secret), what becomes of it (pod deleted,
node reclaimed, Kueue eviction, a cordoned node), and what a list costs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from iris.base.clock import FakeClock
from iris.base.errors import ConfigError, InvalidRequestError, ProviderError
from iris.controller.config import parse_config
from iris.controller.providers.base import SliceState
from iris.controller.providers.kubernetes import KubernetesProvider, make_api_client
from iris.controller.regions.autoscaler import AutoscalerConfig, SliceUsage
from iris.controller.regions.scaler import SliceManager
from tests.providers.conftest import REGION, ZONE_A, ZONE_B, k8s_contract_config
from tests.providers.fake_k8s_server import FakeKubernetes

TOKEN = "cd" * 32


def _gpu_config():
    return parse_config({
        "name": "gpus", "controller": {"address": "tcp://10.1.2.3:7100"},
        "storage": {"log_dir": "/tmp/logs"},
        "regions": {REGION: {"zones": [ZONE_A, ZONE_B], "kubernetes": {"namespace": "iris"},
                             "scale_groups": {
            "h100x2": {"provider": "kubernetes", "accelerator_type": "gpu",
                       "accelerator_variant": "H100", "hosts_per_slice": 2,
                       "accelerators_per_host": 8, "max_slices": 4,
                       "kubernetes": {"local_queue": "gpus", "priority_class": "batch",
                                      "node_selector": {"cloud.google.com/gke-nodepool":
                                                        "a3-pool"}}}}}}})


@pytest.fixture
def k8s() -> Iterator[FakeKubernetes]:
    with FakeKubernetes() as server:
        yield server


def _provider(server: FakeKubernetes, config=None) -> KubernetesProvider:
    config = config or k8s_contract_config()
    site = config.regions[REGION].kubernetes
    return KubernetesProvider.from_config(config, REGION, cluster_token=TOKEN,
                                          api_client=make_api_client(site, server.url))


def test_gpu_slice_is_one_indexed_job_asking_nvidia_gpus_with_the_token_in_a_secret(k8s):
    k8s.set_quota("gpus", 2)
    config = _gpu_config()
    provider = _provider(k8s, config)
    try:
        provider.create_slice(config.scale_group("h100x2"), ZONE_A, "g-1")
        job = k8s.job("g-1")
        spec, pod = job["spec"], job["spec"]["template"]["spec"]
        assert (spec["completions"], spec["parallelism"], spec["completionMode"],
                spec["backoffLimit"]) == (2, 2, "Indexed", 0)
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpus"
        container = pod["containers"][0]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
        assert pod["nodeSelector"] == {"topology.kubernetes.io/zone": ZONE_A,
                                       "cloud.google.com/gke-nodepool": "a3-pool"}
        assert pod["priorityClassName"] == "batch"
        assert "accelerator_count=8" in container["command"][2]
        # The token: only in the Secret, mounted read-only 0400; never in env or argv.
        assert TOKEN not in str(job)
        assert pod["volumes"][0]["secret"] == {"secretName": "iris-gpus-token",
                                               "defaultMode": 0o400}
        assert k8s.secrets["iris/iris-gpus-token"]["stringData"] == {"cluster.token": TOKEN}
        info = provider.slice_status("g-1")
        assert info.state is SliceState.READY
        assert [h.host_id for h in info.hosts] == ["g-1-h0", "g-1-h1"]
    finally:
        provider.close()


def test_tpu_slice_asks_google_tpus_on_gke_topology_selectors(k8s):
    k8s.set_quota("tpu", 16)
    config = k8s_contract_config()
    provider = _provider(k8s, config)
    try:
        provider.create_slice(config.scale_group("v5e-16"), ZONE_A, "t-1")
        pod = k8s.job("t-1")["spec"]["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}
        assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == \
            "tpu-v5-lite-podslice"
        assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4"
        assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in \
            pod["tolerations"]
    finally:
        provider.close()


def test_kueue_admits_a_gang_whole_or_not_at_all(k8s):
    k8s.set_quota("tpu", 6)  # room for one 4-pod slice and 2 more pods: not a second slice
    config = k8s_contract_config()
    provider = _provider(k8s, config)
    try:
        group = config.scale_group("v5e-16")
        provider.create_slice(group, ZONE_A, "t-1")
        provider.create_slice(group, ZONE_A, "t-2")
        states = {s.slice_id: s for s in provider.list_slices()}
        assert states["t-1"].state is SliceState.READY and len(states["t-1"].hosts) == 4
        assert states["t-2"].state is SliceState.CREATING
        assert "queued in Kueue LocalQueue tpu" in states["t-2"].detail
        assert "insufficient quota" in states["t-2"].detail
        assert not [p for p in k8s.pods.values() if p["metadata"]["labels"]["iris.dev/slice"]
                    == "t-2"]  # not one pod of the waiting gang
        provider.delete_slice("t-1")
        assert provider.slice_status("t-2").state is SliceState.READY  # admitted whole now
    finally:
        provider.close()


def test_pod_deleted_node_reclaimed_or_kueue_eviction_is_a_preempted_slice(k8s):
    k8s.set_quota("tpu", 64)
    config = k8s_contract_config()
    provider = _provider(k8s, config)
    try:
        group = config.scale_group("v4-8")
        for sid in ("a", "b", "c"):
            provider.create_slice(group, ZONE_B, sid)
        pod = next(p for p in k8s.pods.values() if p["metadata"]["labels"]["iris.dev/slice"]
                   == "a")
        core = client.CoreV1Api(make_api_client(config.regions[REGION].kubernetes, k8s.url))
        core.delete_namespaced_pod(pod["metadata"]["name"], "iris")  # someone deletes it
        k8s.preempt("b")  # GKE reclaims the spot node
        k8s.evict("c")  # Kueue preempts the workload for a higher-priority one
        states = {s.slice_id: s for s in provider.list_slices()}
        assert {sid: s.state for sid, s in states.items()} == {
            "a": SliceState.PREEMPTED, "b": SliceState.PREEMPTED, "c": SliceState.PREEMPTED}
        assert "BackoffLimitExceeded" in states["a"].detail
        assert "evicted by Kueue (Preempted" in states["c"].detail
        for sid in ("a", "b", "c"):
            provider.delete_slice(sid)
        assert provider.list_slices() == [] and not k8s.pods
    finally:
        provider.close()


def test_cordoned_node_retires_its_slice(k8s):
    k8s.set_quota("tpu", 64)
    config = k8s_contract_config()
    provider = _provider(k8s, config)
    try:
        provider.create_slice(config.scale_group("v4-8"), ZONE_B, "a")
        node = next(iter(k8s.pods.values()))["spec"]["nodeName"]
        k8s.cordon(node)
        info = provider.slice_status("a")
        assert info.state is SliceState.READY and f"node {node} is cordoned" in info.draining
    finally:
        provider.close()


def test_list_costs_one_call_per_kind_whatever_the_number_of_slices(k8s):
    k8s.set_quota("tpu", 64)
    config = k8s_contract_config()
    provider = _provider(k8s, config)
    try:
        for i in range(20):
            provider.create_slice(config.scale_group("v4-8"), ZONE_B, f"s-{i}")
        provider.calls.clear()
        assert len(provider.list_slices()) == 20
        assert provider.calls == {"list_namespaced_job": 1, "list_namespaced_pod": 1,
                                  "list_workloads": 1, "list_nodes": 1}
    finally:
        provider.close()


def test_refusals_and_an_unreachable_api_server_are_named_errors(k8s):
    config = k8s_contract_config()
    provider = _provider(k8s, config)
    try:
        with pytest.raises(InvalidRequestError, match="zone"):
            provider.create_slice(config.scale_group("v4-8"), ZONE_A, "x-1")  # not its zone
    finally:
        provider.close()
    site = config.regions[REGION].kubernetes
    dead = KubernetesProvider.from_config(config, REGION, api_client=make_api_client(
        site, "http://127.0.0.1:9"))
    try:
        with pytest.raises(ProviderError, match="list Jobs failed"):
            dead.list_slices()
    finally:
        dead.close()


@pytest.mark.parametrize(("section", "message"), [
    ({"namespace": "Not_A_Name"}, "namespace"),
    ({"worker_port": 70000}, "worker_port"),
    ({"namepsace": "x"}, "did you mean 'namespace'"),
])
def test_kubernetes_site_mistakes_are_named(section, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"name": "c", "controller": {"address": "tcp://10.0.0.1:7100"},
                      "storage": {"log_dir": "/tmp/l"},
                      "regions": {"r": {"zones": ["z"], "kubernetes": section,
                                        "scale_groups": {"g": {
                                            "provider": "kubernetes",
                                            "accelerator_type": "cpu",
                                            "hosts_per_slice": 1}}}}})


def test_slice_manager_shows_kueue_waiting_and_grows_within_quota(k8s):
    k8s.set_quota("tpu", 4)  # one v5e-16 slice at a time
    config = k8s_contract_config()
    provider = _provider(k8s, config)
    clock = FakeClock(start=0.0)
    cfg = AutoscalerConfig(scale_up_delay_s=0, hosts_register=False, poll_interval_s=1)
    mgr = SliceManager(REGION, [config.scale_group("v5e-16")], provider, clock, cfg,
                       id_prefix="k8s-t", max_workers=2)
    try:
        for step in range(6):  # work for two slices; the fake's Kueue has room for one
            mgr.tick({}, {"v5e-16": 2} if step < 2 else {})  # the first tick only lists
            assert mgr.settle(30)
            clock.advance(1.0)
        slices = mgr.status()["groups"][0]["slices"]
        assert sorted(s["state"] for s in slices) == ["CREATING", "READY"]
        waiting = next(s for s in slices if s["state"] == "CREATING")
        assert "insufficient quota" in waiting["detail"]
        ready = next(s["slice_id"] for s in slices if s["state"] == "READY")
        provider.calls.clear()
        for _ in range(3):
            mgr.tick({ready: SliceUsage(4, 4)}, {"v5e-16": 1})
            assert mgr.settle(30)
            clock.advance(1.0)
        assert provider.calls.get("list_namespaced_job", 0) <= 3  # one per list, not per slice
        assert "create_namespaced_job" not in provider.calls  # the waiting one absorbs demand
    finally:
        mgr.close()
        provider.close()


def _verb(method: str, path: str) -> tuple[str, str, str]:
    """(API group, resource, RBAC verb) of one request the provider made."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[0] == "namespaces":
        rest = rest[2:]
    named = len(rest) > 1
    verb = {"POST": "create", "PUT": "update", "DELETE": "delete",
            "GET": "get" if named else "list"}[method]
    return group, rest[0], verb


def test_rbac_role_in_deploy_grants_exactly_the_calls_the_provider_makes(k8s):
    import yaml

    from tests.providers.test_deploy_files import DEPLOY

    k8s.set_quota("tpu", 64)
    config = k8s_contract_config()
    for _ in range(2):  # the second provider finds the token Secret there: it updates it
        provider = _provider(k8s, config)
        try:
            provider.create_slice(config.scale_group("v4-8"), ZONE_B, f"r-{len(k8s.jobs)}")
            provider.list_slices()
            provider.slice_status("r-0")
            provider.delete_slice("r-0")
        finally:
            provider.close()
    used = {_verb(m, p) for m, p in k8s.requests}
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "rbac.yaml").read_text()))
    granted = {(g, r, v) for d in docs if d["kind"] in ("Role", "ClusterRole")
               for rule in d["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert used == granted


def test_controller_manifest_carries_a_config_that_loads():
    import yaml

    from tests.providers.test_deploy_files import DEPLOY

    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "controller.yaml").read_text()))
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    config = parse_config(yaml.safe_load(config_map["data"]["cluster.yaml"]))
    (region,) = config.regions.values()
    assert region.kubernetes is not None
    groups = {g.name: g for g in config.scale_groups()}
    assert groups["h100x2"].kubernetes.local_queue == "iris-gpus"
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    assert statefulset["spec"]["template"]["spec"]["serviceAccountName"] == "iris-controller"
