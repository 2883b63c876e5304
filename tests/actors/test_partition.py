"""A real network partition between two network namespaces (hosts), with CURVE on.

The server lives in namespace A, the caller in namespace B, joined by a veth pair. Cutting
the link must turn a call in flight into PeerUnavailableError (never a hang: libzmq drops
what it had queued when it tears the connection down), and calls must work again once the
link is back. Needs root and iproute2 (CI has both); skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iris.actors import generate_keys

ROOT = Path(__file__).resolve().parents[2]

SERVER = """
import threading
import iris
from iris.actors import ClusterContext, Node, NodeConfig, Registry, Security
from iris.actors.registry import REGISTRY_KEY

@iris.actor
class Echo:
    def echo(self, value):
        return value
    def slow(self, seconds):
        threading.Event().wait(seconds)
        return seconds

node = Node(NodeConfig(bind="tcp://{ip}:7411"), security=Security.load("{keys}")).start()
node.host(REGISTRY_KEY, Registry)
with ClusterContext(node, node.address) as ctx:
    Echo.serve("echo")
    print("READY", flush=True)
    threading.Event().wait()
"""

CLIENT = """
import sys, time
import iris
ctx = iris.connect("tcp://{server_ip}:7411", bind="tcp://{ip}:0")
echo = iris.resolve("echo", timeout=60)
print("CALLED", echo.echo("before").result(30), flush=True)
sys.stdin.readline()  # the test cuts the link now
started = time.monotonic()
try:
    echo.slow(1).result(60)
    print("UNEXPECTED success across a partition", flush=True)
except iris.PeerUnavailableError as exc:
    print("FAILED", round(time.monotonic() - started, 2), type(exc).__name__, flush=True)
sys.stdin.readline()  # the test heals the link now
for attempt in range(600):
    try:
        print("HEALED", echo.echo("after").result(5), attempt, flush=True)
        break
    except iris.IrisError:
        pass
ctx.close()
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = f"{os.getpid() % 10000}{random.randrange(100)}"
    net = f"10.{random.randrange(150, 250)}.{random.randrange(256)}"
    a, b = f"irisA{tag}", f"irisB{tag}"
    try:
        _ip("netns", "add", a)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.decode().strip()}")
    try:
        _ip("netns", "add", b)
        _ip("link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        _ip("link", "set", f"va{tag}", "netns", a)
        _ip("link", "set", f"vb{tag}", "netns", b)
        _ip("-n", a, "addr", "add", f"{net}.1/24", "dev", f"va{tag}")
        _ip("-n", b, "addr", "add", f"{net}.2/24", "dev", f"vb{tag}")
        for ns, dev in ((a, f"va{tag}"), (b, f"vb{tag}")):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", dev, "up")
        yield {"a": a, "b": b, "ip_a": f"{net}.1", "ip_b": f"{net}.2", "link_b": f"vb{tag}"}
    finally:
        for ns in (a, b):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _spawn(ns: str, code: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _line(proc: subprocess.Popen, prefix: str) -> str:
    for line in proc.stdout:
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"no {prefix!r} line; stderr:\n{proc.stderr.read()}")


def test_partition_fails_calls_in_flight_and_heals(two_hosts, tmp_path):
    keys = generate_keys(tmp_path / "keys")
    server = _spawn(two_hosts["a"], SERVER.format(ip=two_hosts["ip_a"], keys=keys))
    client = None
    try:
        _line(server, "READY")
        client = _spawn(two_hosts["b"], CLIENT.format(server_ip=two_hosts["ip_a"],
                                                      ip=two_hosts["ip_b"]),
                        {"IRIS_KEYS_DIR": str(keys)})
        assert _line(client, "CALLED") == "CALLED before"
        _ip("-n", two_hosts["b"], "link", "set", two_hosts["link_b"], "down")
        client.stdin.write("partition\n")
        client.stdin.flush()
        failed = _line(client, "FAILED").split()
        assert failed[2] == "PeerUnavailableError"
        _ip("-n", two_hosts["b"], "link", "set", two_hosts["link_b"], "up")
        client.stdin.write("heal\n")
        client.stdin.flush()
        assert _line(client, "HEALED").split()[1] == "after"
    finally:
        for proc in (client, server):
            if proc is not None:
                proc.kill()
                proc.wait(30)
