"""Test hosts of our own: network namespaces joined by veth pairs (used by bench/faults.py,
bench/weights.py --hosts, tests/faults/test_partitions.py and tests/actors/test_bulk_hosts.py).

- cluster(): one namespace joined to this one, and a cluster with a worker inside it.
- hosts(n): n namespaces on one bridge, which lives in a namespace of its own (a switch):
  nothing is added to this machine's own network namespace.

The namespace and its 10.213.N.0/24 addresses exist only on this machine, made and removed
here. A node refuses to bind a non-loopback address without CURVE keys, so the cluster has
keys. The worker's job environment is built outside the namespace (it has no route to a
package index) under the worker's work directory, where the worker finds it ready.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import iris
from iris.wire.states import ENV_CACHE_ENV
from iris.worker.envs import EnvConfig, EnvironmentCache

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class NetnsCluster:
    ns: str
    ns_if: str
    address: str
    keys: Path

    def cut(self) -> None:
        _ip("-n", self.ns, "link", "set", self.ns_if, "down")

    def heal(self) -> None:
        _ip("-n", self.ns, "link", "set", self.ns_if, "up")


def available() -> str | None:
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if subprocess.run(["sh", "-c", "command -v ip"], capture_output=True).returncode:
        return "iproute2 (ip) is not installed"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Hosts:
    """n hosts on one switch: host i is namespace `names[i]` with address `ips[i]` on its
    interface `links[i]`."""

    names: list[str]
    ips: list[str]
    links: list[str]

    def prefix(self, i: int) -> list[str]:
        """The command prefix that runs a program on host i."""
        return ["ip", "netns", "exec", self.names[i]]

    def cap(self, gbit: float) -> None:
        """Cap every host's outgoing rate (tc tbf works here; netem does not)."""
        for name, link in zip(self.names, self.links, strict=True):
            subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "replace", "dev", link,
                            "root", "tbf", "rate", f"{gbit}gbit", "burst", "4mb",
                            "latency", "50ms"], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def hosts(n: int) -> Iterator[Hosts]:
    """n namespaces 10.214.X.1..n on a bridge in a switch namespace; all removed after
    (their processes killed first)."""
    tag = secrets.token_hex(3)
    switch = f"iris-sw-{tag}"
    net = f"10.214.{secrets.randbelow(250) + 1}"
    made = Hosts([f"iris-h{i}-{tag}" for i in range(n)], [f"{net}.{i + 1}" for i in range(n)],
                 [f"eth{i}" for i in range(n)])
    created = [switch]
    try:
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for i, (name, ip, link) in enumerate(zip(made.names, made.ips, made.links,
                                                 strict=True)):
            _ip("netns", "add", name)
            created.append(name)
            _ip("-n", name, "link", "add", link, "type", "veth", "peer", "name", f"p{i}",
                "netns", switch)
            _ip("-n", switch, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", switch, "link", "set", f"p{i}", "up")
            _ip("-n", name, "addr", "add", f"{ip}/24", "dev", link)
            _ip("-n", name, "link", "set", link, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield made
    finally:
        for name in reversed(created):
            for pid in subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                                      text=True).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), 9)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


@contextlib.contextmanager
def cluster(tmp: Path) -> Iterator[NetnsCluster]:
    """A controller here and one worker in a fresh namespace; everything removed after."""
    tag = secrets.token_hex(3)
    ns, host_if, ns_if = f"iris-{tag}", f"vh{tag}", f"vn{tag}"
    net = f"10.213.{secrets.randbelow(250) + 1}"
    procs: list[subprocess.Popen] = []
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{net}.1/24", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns, "addr", "add", f"{net}.2/24", "dev", ns_if)
        _ip("-n", ns, "link", "set", ns_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        keys = iris.generate_keys(tmp / "keys")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "IRIS_KEYS_DIR": str(keys)}
        state = tmp / "state"
        with socket.socket() as s:
            s.bind((f"{net}.1", 0))
            address = f"tcp://{net}.1:{s.getsockname()[1]}"
        # The worker's namespace has no route to a package index: its default task
        # environment is built here first, in the cache it will use ($IRIS_ENV_CACHE, which
        # a test run shares, else its work dir's).
        EnvironmentCache(EnvConfig(root=Path(os.environ.get(ENV_CACHE_ENV) or
                                             tmp / "w" / "envs"))).get(())
        ctl = subprocess.Popen([sys.executable, "-m", "iris", "controller", "serve",
                                "--state-dir", str(state), "--bind", address, "--keys",
                                str(keys)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=env)
        procs.append(ctl)
        if not ctl.stdout.readline().startswith("controller serving at"):
            raise RuntimeError("the controller did not start")
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "iris", "worker", "--controller",
             address, "--bind", f"tcp://{net}.2:0", "--keys", str(keys), "--work-dir",
             str(tmp / "w"), "--token-file", str(state / "cluster.token")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        yield NetnsCluster(ns, ns_if, address, keys)
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 9)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)


# A command task: marks its start (with its pid), then waits for the release file.
HOLD = ("echo $$ > {marks}/start-$IRIS_ATTEMPT_ID; "
        "while [ ! -e {marks}/release ]; do sleep 0.05; done")
