"""Access to the dashboard: a token off loopback, and a kill refused without it."""

from __future__ import annotations

import dataclasses
import json

import pytest

import iris
from iris.base.errors import ConfigError
from iris.controller.config import ScaleGroupConfig
from iris.dashboard import start_dashboard
from tests.dashboard.conftest import http


@pytest.fixture
def empty_cluster(tmp_path):
    """No workers: a submitted job stays pending, so a refused kill is easy to see."""
    with iris.local_cluster(workers=0, state_dir=tmp_path) as ctx:
        yield ctx


def test_dashboard_off_loopback_without_a_token_is_refused_before_listening(empty_cluster):
    with pytest.raises(ConfigError, match="not loopback: pass a token"):
        start_dashboard(empty_cluster.node, empty_cluster.address, host="0.0.0.0", port=0)


def test_dashboard_on_a_taken_port_says_so(empty_cluster):
    first = start_dashboard(empty_cluster.node, empty_cluster.address, port=0)
    try:
        with pytest.raises(ConfigError, match=f"could not listen on 127.0.0.1:{first.port}"):
            start_dashboard(empty_cluster.node, empty_cluster.address, port=first.port)
    finally:
        first.stop()


def test_dashboard_with_a_token_refuses_reads_and_kills_without_it(empty_cluster):
    job = iris.submit(["true"], name="guarded")
    handle = start_dashboard(empty_cluster.node, empty_cluster.address, host="0.0.0.0",
                             port=0, token="s3cret")
    try:
        url = f"http://127.0.0.1:{handle.port}/"
        assert http(url + "api/jobs")[0] == 401
        assert http(url + "metrics")[0] == 401
        kill = json.dumps({"job_id": job.job_id}).encode()
        headers = {"X-Iris-Dashboard": "1", "Content-Type": "application/json"}
        status, body = http(url + "api/job/kill", method="POST", data=kill, headers=headers)
        assert status == 401 and "token" in body["error"]["message"]
        # A token in the query string is for GETs only: a kill must carry the header.
        status, _ = http(url + "api/job/kill?token=s3cret", method="POST", data=kill,
                         headers=headers)
        assert status == 401
        assert job.status()["state"] == "pending"

        assert http(url + "api/jobs?token=s3cret")[0] == 200
        assert http(url + "api/jobs", headers={"Authorization": "Bearer wrong"})[0] == 401
        status, body = http(url + "api/job/kill", method="POST", data=kill,
                            headers={**headers, "Authorization": "Bearer s3cret"})
        assert status == 200 and body["state"] == "killed"
    finally:
        handle.stop()


def test_capacity_page_lists_configured_scale_groups_without_inventing_slices(empty_cluster):
    group = ScaleGroupConfig(name="v5e-16", region="us-west4", accelerator_type="tpu",
                             accelerator_variant="v5litepod-16", hosts_per_slice=4,
                             accelerators_per_host=4, zones=("us-west4-a",), max_slices=8)
    handle = start_dashboard(empty_cluster.node, empty_cluster.address, port=0,
                             scale_groups=[dataclasses.asdict(group)])
    try:
        status, body = http(handle.url + "api/capacity")
        assert status == 200 and body["configured"] is True
        (shown,) = body["scale_groups"]
        assert shown["name"] == "v5e-16" and shown["max_slices"] == 8
        assert shown["zones"] == ["us-west4-a"]
        assert body["autoscaler"] is False and "no autoscaler" in body["note"]
    finally:
        handle.stop()
