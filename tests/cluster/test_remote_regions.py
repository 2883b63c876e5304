"""Region actors served in other processes (regions/remote.py): the setting that names them
is checked, and a real controller places a gang through one over TCP."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from iris.actors import Node, NodeConfig, tokens
from iris.actors.keys import CONTROLLER_KEY, region_key
from iris.base.errors import ConfigError
from iris.base.resources import Resources
from iris.controller.config import parse_config
from iris.controller.credentials import controller_token, load_secret
from iris.controller.main import host_controller
from iris.controller.regions.remote import check_region_actors
from iris.controller.service import ControllerConfig

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east"
SERVE = """
import os, sys
from iris.actors import Node, NodeConfig
from iris.controller.regions.remote import serve_region
node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
serve_region(node, sys.argv[1], bytes.fromhex(os.environ["REGION_TOKEN"]))
print("READY", node.address, flush=True)
sys.stdin.read()
"""


def _cluster(region: dict) -> dict:
    return {"name": "c", "controller": {"address": "tcp://10.0.0.1:7100"},
            "storage": {"log_dir": "/tmp/logs"}, "regions": {REGION: region}}


def test_region_actor_address_is_read_from_the_cluster_file():
    config = parse_config(_cluster({"zones": ["us-east-a"], "actor_address": "tcp://10.0.0.7:7200"}))
    assert config.regions[REGION].actor_address == "tcp://10.0.0.7:7200"
    assert parse_config(_cluster({"zones": ["us-east-a"]})).regions[REGION].actor_address is None


def test_the_served_controller_is_given_the_cluster_files_region_actors(tmp_path):
    from iris.controller.main import _settings

    cluster = parse_config(_cluster({"zones": ["us-east-a"], "actor_address": "tcp://h:7200"}))
    assert _settings(cluster, tmp_path, None)["region_actors"] == {REGION: "tcp://h:7200"}


@pytest.mark.parametrize(("address", "expected"), [
    ("10.0.0.7:7200", "regions.us-east.actor_address: '10.0.0.7:7200' is not tcp://HOST:PORT"),
    ("tcp://10.0.0.7:0", "regions.us-east.actor_address: 'tcp://10.0.0.7:0': the port must be"),
    ("tcp://10.0.0.7:70000", "regions.us-east.actor_address: 'tcp://10.0.0.7:70000': the port"),
    (7200, "regions.us-east.actor_address: expected str, got int"),
])
def test_bad_region_actor_address_in_the_cluster_file_names_key_and_problem(address, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(_cluster({"zones": ["us-east-a"], "actor_address": address}))
    assert str(err.value).startswith(expected), str(err.value)


def test_an_autoscaled_region_cannot_be_served_elsewhere():
    group = {"accelerator_type": "cpu", "hosts_per_slice": 1, "zones": ["us-east-a"],
             "provider": "local"}
    with pytest.raises(ConfigError, match=r"^regions.us-east.actor_address: region 'us-east' "
                                          r"has scale groups"):
        parse_config(_cluster({"zones": ["us-east-a"], "actor_address": "tcp://h:7200",
                               "scale_groups": {"cpu": group}}))


@pytest.mark.parametrize(("value", "expected"), [
    (["tcp://h:1"], "region_actors: expected a mapping of region -> address, got list"),
    ({"US_East": "tcp://h:1"}, "region_actors: 'US_East' is not a valid name"),
    ({"us-east": None}, "region_actors.us-east: None is not tcp://HOST:PORT or ipc://PATH"),
    ({"us-east": "tcp://h:0"}, "region_actors.us-east: 'tcp://h:0': the port must be 1-65535"),
])
def test_bad_region_actors_setting_is_refused_naming_the_entry(value, expected):
    with pytest.raises(ConfigError) as err:
        check_region_actors(value)
    assert str(err.value).startswith(expected), str(err.value)


def test_controller_with_a_bad_region_actors_setting_does_not_start(tmp_path):
    node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
    try:
        with pytest.raises(ConfigError, match="region_actors.us-east: 'nowhere' is not"):
            host_controller(node, ControllerConfig(state_dir=tmp_path / "state",
                                                   region_actors={REGION: "nowhere"}))
        assert not (tmp_path / "state").exists()  # refused before anything was written
    finally:
        node.stop()


@pytest.fixture
def remote_region(tmp_path):
    """A Region actor in a process of its own, granting the controller's token of
    tmp_path/state: (state_dir, its node's address)."""
    state_dir = tmp_path / "state"
    token = controller_token(load_secret(state_dir))
    proc = subprocess.Popen([sys.executable, "-c", SERVE, REGION], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "REGION_TOKEN": token.hex()})
    try:
        line = proc.stdout.readline().split()
        assert line and line[0] == "READY", line
        yield state_dir, line[1]
    finally:
        proc.kill()
        proc.wait(30)


def test_gang_is_placed_through_a_region_actor_in_another_process(remote_region):
    state_dir, address = remote_region
    server = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
    client = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
    try:
        host_controller(server, ControllerConfig(state_dir=state_dir, worker_dead_after_s=3600.0,
                                                 region_actors={REGION: address}))
        _register_slice(client, server.address, tokens.load_or_create(
            state_dir / tokens.CLUSTER_TOKEN_FILE))
        job = client.call(server.address, CONTROLLER_KEY, "submit", ({
            "name": "gang", "entrypoint": {"kind": "command", "argv": ["true"]}, "replicas": 1,
            "resources": Resources(tpu="v5litepod-16", cpu=1).to_dict(), "env": {}, "pip": [],
            "constraints": {}, "user": "t", "request_id": uuid.uuid4().hex},)).result(30)
        pause = threading.Event()
        for _ in range(1200):  # bounded: 60 s
            status = client.call(server.address, CONTROLLER_KEY, "status",
                                 (job["job_id"],)).result(30)
            if sum(1 for t in status["tasks"] if t.get("worker_id")) == 4:
                break
            pause.wait(0.05)
        assert {t.get("worker_id") for t in status["tasks"]} == {f"{REGION}-s0-h{h}"
                                                                 for h in range(4)}
        # The placement went through the other process: it holds the inventory pushed and
        # committed the reservation.
        stats = client.call(address, region_key(REGION), "stats").result(30)
        assert stats["committed"] == 1, stats
        inventory = client.call(address, region_key(REGION), "inventory").result(30)
        assert inventory["slices"] == {f"{REGION}-s0": [f"{REGION}-s0-h{h}" for h in range(4)]}
        assert client.call(server.address, CONTROLLER_KEY, "regions").result(30) == \
            {REGION: address}
    finally:
        client.stop()
        server.stop()


def _register_slice(client: Node, address: str, token: bytes) -> None:
    """Four hosts of one v5litepod-16 slice in REGION, registered as workers at `client`'s
    address (which serves no worker: the start commands fail, the assignment stands)."""
    attrs = {"region": REGION, "zone": f"{REGION}-a", "slice_id": f"{REGION}-s0",
             "accelerator_type": "v5litepod-16", "accelerator_count": "4", "cpu": "8",
             "memory": str(64 * 10**9)}
    for h in range(4):
        worker = f"{REGION}-s0-h{h}"
        cred = client.call(address, CONTROLLER_KEY, "join", (worker,), auth=token).result(30)
        client.call(address, CONTROLLER_KEY, "register_worker",
                    (worker, client.address, attrs, [], []),
                    auth=cred["credential"]).result(30)
