"""GcpTpuProvider specifics against the fake TPU REST server: LROs, errors, what is sent."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc

from iris.base.errors import (
    CapacityError,
    ConfigError,
    ConflictError,
    InvalidRequestError,
    ProviderError,
)
from iris.controller.providers.base import SliceState
from iris.controller.providers.gcp_tpu import (
    DEFAULT_STARTUP_SCRIPT,
    GcpTpuProvider,
    make_tpu_client,
    render_startup_script,
)
from tests.providers.conftest import FAST_GCP, REGION, ZONE_A, ZONE_B, cluster_config


def test_create_slice_slow_operation_polls_until_done_then_ready(fake_tpu, gcp_provider):
    fake_tpu.polls_before_done = 4
    info = gcp_provider.create_slice(cluster_config().scale_group("v5e-16"), ZONE_A, "s-1")
    assert info.state is SliceState.READY
    assert len(fake_tpu.requests_for("GET", "/operations/")) == 4


def test_create_slice_failed_operation_raises_capacity_error_from_resource_exhausted(
        fake_tpu, gcp_provider):
    fake_tpu.stock_out(ZONE_A)
    with pytest.raises(CapacityError, match=f"zone {ZONE_A}") as err:
        gcp_provider.create_slice(cluster_config().scale_group("v5e-16"), ZONE_A, "s-1")
    assert isinstance(err.value.__cause__, gexc.ResourceExhausted)
    assert "no more capacity" in str(err.value)
    assert fake_tpu.node("s-1") is None


def test_create_slice_quota_429_raises_capacity_error_naming_zone(fake_tpu, gcp_provider):
    fake_tpu.exhaust_quota(ZONE_B)
    with pytest.raises(CapacityError, match=f"zone {ZONE_B}.*Quota"):
        gcp_provider.create_slice(cluster_config().scale_group("v4-8"), ZONE_B, "s-1")
    assert gcp_provider.list_slices() == []


def test_create_slice_request_carries_scheduling_labels_and_startup_script(fake_tpu, gcp_provider):
    config = cluster_config()
    gcp_provider.create_slice(config.scale_group("v5e-16"), ZONE_A, "pre-1")
    gcp_provider.create_slice(config.scale_group("v4-8"), ZONE_B, "spot-1")
    posts = {r.query["nodeId"]: r for r in fake_tpu.requests_for("POST", "/nodes")}
    pre, spot = posts["pre-1"].body, posts["spot-1"].body
    assert pre["schedulingConfig"] == {"preemptible": True}
    assert spot["schedulingConfig"] == {"spot": True}
    assert (pre["acceleratorType"], pre["runtimeVersion"]) == ("v5litepod-16", "v2-alpha-tpuv5-lite")
    assert pre["labels"] == {"iris-cluster": "test", "iris-group": "v5e-16", "iris-region": REGION}
    assert pre["serviceAccount"]["email"] == "iris@test-proj.iam"
    script = pre["metadata"]["startup-script"]
    assert "IRIS_CONTROLLER=tcp://10.1.2.3:7100" in script
    assert "IRIS_SLICE_ID=pre-1" in script
    assert "IRIS_PACKAGE=iris==0.1.0" in script
    assert "iris worker --controller" in script
    assert "{{" not in script
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_create_slice_on_demand_group_sends_no_preemptible_flags(fake_tpu, gcp_provider):
    group = cluster_config().scale_group("v5e-16")
    on_demand = type(group)(**{**group.__dict__, "preemptible": False})
    gcp_provider.create_slice(on_demand, ZONE_A, "od-1")
    (post,) = fake_tpu.requests_for("POST", "/nodes")
    assert post.body.get("schedulingConfig", {}) == {}


def test_list_slices_many_pages_returns_every_slice(fake_tpu, gcp_provider):
    fake_tpu.max_page_size = 2
    group = cluster_config().scale_group("v4-8")
    for i in range(5):
        gcp_provider.create_slice(group, ZONE_B, f"s-{i}")
    assert sorted(s.slice_id for s in gcp_provider.list_slices("v4-8")) == [
        f"s-{i}" for i in range(5)]
    assert len([r for r in fake_tpu.requests_for("GET", f"{ZONE_B}/nodes")
                if not r.path.split("/nodes")[1]]) >= 3


def test_list_slices_ignores_nodes_of_another_cluster(fake_tpu, gcp_provider):
    other = GcpTpuProvider.from_config(cluster_config("other"), REGION,
                                       client=make_tpu_client(fake_tpu.url), **FAST_GCP)
    try:
        other.create_slice(cluster_config("other").scale_group("v4-8"), ZONE_B, "theirs")
        assert gcp_provider.list_slices() == []
        assert gcp_provider.slice_status("theirs").state is SliceState.NOT_FOUND
        gcp_provider.delete_slice("theirs")
        assert fake_tpu.node("theirs") is not None
    finally:
        other.close()


def test_create_slice_id_taken_in_zone_by_other_cluster_raises_conflict_from_409(
        fake_tpu, gcp_provider):
    theirs = GcpTpuProvider.from_config(cluster_config("other"), REGION,
                                        client=make_tpu_client(fake_tpu.url), **FAST_GCP)
    try:
        theirs.create_slice(cluster_config("other").scale_group("v4-8"), ZONE_B, "s-1")
        with pytest.raises(ConflictError, match=f"zone {ZONE_B}") as err:
            gcp_provider.create_slice(cluster_config().scale_group("v4-8"), ZONE_B, "s-1")
        assert isinstance(err.value.__cause__, gexc.Conflict)
        assert fake_tpu.node("s-1")["labels"]["iris-cluster"] == "other"
    finally:
        theirs.close()


def test_delete_slice_slow_operation_waits_until_node_is_gone(fake_tpu, gcp_provider):
    gcp_provider.create_slice(cluster_config().scale_group("v4-8"), ZONE_B, "s-1")
    fake_tpu.polls_before_done = 3
    gcp_provider.delete_slice("s-1")
    assert fake_tpu.node("s-1") is None
    assert len(fake_tpu.requests_for("DELETE", "/nodes/s-1")) == 1


def test_slice_status_terminated_node_reports_failed(fake_tpu, gcp_provider):
    gcp_provider.create_slice(cluster_config().scale_group("v4-8"), ZONE_B, "s-1")
    fake_tpu.set_state("s-1", "TERMINATED")
    info = gcp_provider.slice_status("s-1")
    assert info.state is SliceState.FAILED
    assert "TERMINATED" in info.detail


def test_list_slices_server_error_raises_provider_error(fake_tpu, gcp_provider):
    fake_tpu.fail_next_request(500)
    with pytest.raises(ProviderError, match="list nodes") as err:
        gcp_provider.list_slices()
    assert not isinstance(err.value, CapacityError)


def test_create_slice_cpu_group_refused_without_calling_gcp(fake_tpu, gcp_provider):
    with pytest.raises(InvalidRequestError, match="TPU slices only"):
        gcp_provider.create_slice(cluster_config().scale_group("cpu"), ZONE_A, "c-1")
    assert fake_tpu.requests == []


def test_create_slice_group_of_another_region_refused_without_calling_gcp(fake_tpu, gcp_provider):
    group = cluster_config().scale_group("v4-8")
    elsewhere = type(group)(**{**group.__dict__, "region": "us-east5", "zones": ("us-east5-a",)})
    with pytest.raises(InvalidRequestError, match="not in region us-central2"):
        gcp_provider.create_slice(elsewhere, "us-east5-a", "e-1")
    assert fake_tpu.requests == []


def test_render_startup_script_unknown_placeholder_raises_config_error():
    values = dict.fromkeys(["IRIS_CONTROLLER", "IRIS_REGION", "IRIS_ZONE", "IRIS_SLICE_ID",
                            "IRIS_SCALE_GROUP", "IRIS_CLUSTER", "IRIS_PACKAGE",
                            "IRIS_ACCELERATOR"], "x")
    with pytest.raises(ConfigError, match="IRIS_CONTROLER"):
        render_startup_script("X={{IRIS_CONTROLER}}", values)


def test_render_startup_script_hostile_value_stays_one_shell_word(tmp_path: Path):
    values = dict.fromkeys(["IRIS_REGION", "IRIS_ZONE", "IRIS_SLICE_ID", "IRIS_SCALE_GROUP",
                            "IRIS_CLUSTER", "IRIS_PACKAGE", "IRIS_ACCELERATOR"], "x")
    marker = tmp_path / "pwned"
    values["IRIS_CONTROLLER"] = f"a b'; touch {marker}; $(touch {marker})"
    script = render_startup_script('C={{IRIS_CONTROLLER}}\nprintf %s "$C"', values)
    out = subprocess.run(["bash", "-c", script], text=True, capture_output=True, check=True)
    assert out.stdout == values["IRIS_CONTROLLER"]
    assert not marker.exists()


def test_from_config_missing_startup_script_raises_config_error(fake_tpu, tmp_path):
    config = cluster_config()
    gcp = type(config.gcp)(**{**config.gcp.__dict__, "startup_script": str(tmp_path / "nope.sh")})
    broken = type(config)(**{**config.__dict__, "gcp": gcp})
    with pytest.raises(ConfigError, match="gcp.startup_script"):
        GcpTpuProvider.from_config(broken, REGION, client=make_tpu_client(fake_tpu.url))


def test_default_startup_script_is_the_deploy_template():
    assert DEFAULT_STARTUP_SCRIPT.read_text().count("{{IRIS_CONTROLLER}}") == 1


def test_create_slice_operation_never_done_raises_provider_error_and_deletes_node(fake_tpu):
    fake_tpu.polls_before_done = 10**9
    provider = GcpTpuProvider.from_config(cluster_config(), REGION,
                                          client=make_tpu_client(fake_tpu.url),
                                          **{**FAST_GCP, "create_timeout_s": 0.3})
    try:
        with pytest.raises(ProviderError, match="create s-1 failed: TimeoutError") as err:
            provider.create_slice(cluster_config().scale_group("v4-8"), ZONE_B, "s-1")
        assert not isinstance(err.value, CapacityError)
        assert len(fake_tpu.requests_for("DELETE", "/nodes/s-1")) == 1
        assert fake_tpu.node("s-1")["state"] == "DELETING"
    finally:
        provider.close()


def test_created_node_hands_its_workers_the_cluster_token_as_metadata(fake_tpu, tmp_path):
    """A worker on a TPU VM proves its role with the cluster token: the provider puts it in
    the node's metadata and the startup script hands it to `iris worker --token-file`."""
    provider = GcpTpuProvider.from_config(cluster_config(), REGION, cluster_token="ab" * 32,
                                          client=make_tpu_client(fake_tpu.url), **FAST_GCP)
    try:
        provider.create_slice(cluster_config().scale_group("v4-8"), ZONE_B, "tok-1")
    finally:
        provider.close()
    body = fake_tpu.requests_for("POST", "/nodes")[-1].body
    assert body["metadata"]["iris-cluster-token"] == "ab" * 32
    assert "--token-file /etc/iris/cluster.token" in body["metadata"]["startup-script"]
    assert "ab" * 32 not in body["metadata"]["startup-script"]  # not in the script's log
    assert "ab" * 32 not in repr(provider._s)  # nor in logged settings


def test_controller_hands_its_gcp_provider_its_own_cluster_token(fake_tpu, tmp_path,
                                                                monkeypatch):
    from iris.actors import tokens
    from iris.controller.main import scaling_from_config
    from iris.controller.providers.gcp_tpu import ENV_ENDPOINT

    monkeypatch.setenv(ENV_ENDPOINT, fake_tpu.url)
    token = tokens.load_or_create(tmp_path / tokens.CLUSTER_TOKEN_FILE)
    (scaling,) = [s for s in scaling_from_config(cluster_config(), tmp_path)
                  if s.region == REGION]
    provider = scaling.provider("tcp://127.0.0.1:7100")
    try:
        assert provider._s.cluster_token == token.hex()
    finally:
        provider.close()
