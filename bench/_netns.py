"""A test host of our own: a network namespace joined to this one by a veth pair, and a cluster
with a worker inside it (used by bench/faults.py and tests/faults/test_partitions.py).

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
        EnvironmentCache(EnvConfig(root=tmp / "w" / "envs")).get(())
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
