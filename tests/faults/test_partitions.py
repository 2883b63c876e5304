"""A worker on a host of its own (a network namespace joined by a veth pair, 10.213.N.0/24), cut off from the
controller by taking its link down: a short cut costs nothing; a cut past the lease is fenced
(the attempt stopped, on the worker's side) and the task runs at most once at a time.

The namespace is this test's own; the cluster uses
CURVE keys, since a node refuses to bind a non-loopback address without them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import iris
from iris.worker.envs import EnvConfig, EnvironmentCache
from iris.worker.records import is_alive

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def netns_host():
    """(namespace, host-side address, namespace-side address); removed afterwards."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (scripts/test.sh installs it)")
    tag = secrets.token_hex(3)
    ns, host_if, ns_if = f"iris-{tag}", f"vh{tag}", f"vn{tag}"
    net = f"10.213.{secrets.randbelow(250) + 1}"  # tests running at once get their own
    try:
        _ip("netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.decode().strip()}")
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{net}.1/24", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns, "addr", "add", f"{net}.2/24", "dev", ns_if)
        _ip("-n", ns, "link", "set", ns_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield ns, ns_if, f"{net}.1", f"{net}.2"
    finally:
        subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)


# Marks its start (with its pid), then waits for the release file.
_HOLD = ("echo $$ > {marks}/start-$IRIS_ATTEMPT_ID; "
         "while [ ! -e {marks}/release ]; do sleep 0.05; done")


def _starts(d: Path) -> list[Path]:
    return sorted(d.glob("start-*"), key=lambda p: p.stat().st_mtime)


@pytest.mark.parametrize("cut_s, moved", [(5.0, False), (20.0, True)])
def test_a_partitioned_worker_never_overlaps_its_task(netns_host, tmp_path, wait_until,
                                                      cut_s, moved):
    ns, ns_if, host_ip, ns_ip = netns_host
    keys = iris.generate_keys(tmp_path / "keys")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IRIS_KEYS_DIR": str(keys)}
    state = tmp_path / "state"
    # The task environment is built here, where the package index is reachable; the worker
    # in the namespace (no route out) finds it ready under its work directory.
    EnvironmentCache(EnvConfig(root=tmp_path / "w" / "envs")).get(())
    address = f"tcp://{host_ip}:{_free_port(host_ip)}"
    ctl = subprocess.Popen([sys.executable, "-m", "iris", "controller", "serve", "--state-dir",
                            str(state), "--bind", address, "--keys", str(keys)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    procs = [ctl]
    try:
        assert ctl.stdout.readline().startswith("controller serving at")
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "iris", "worker", "--controller",
             address, "--bind", f"tcp://{ns_ip}:0", "--keys", str(keys), "--work-dir",
             str(tmp_path / "w"), "--token-file", str(state / "cluster.token")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        marks = tmp_path / "marks"
        marks.mkdir()
        os.environ["IRIS_KEYS_DIR"] = str(keys)
        try:
            with iris.connect(address):
                # A command: the namespace has no route to a package index for a job venv.
                job = iris.submit(["sh", "-c", _HOLD.format(marks=marks)],
                                  max_retries_failure=0)
                first = wait_until(lambda: _starts(marks), what="the attempt",
                                   explain=job.status)[0]
                _ip("-n", ns, "link", "set", ns_if, "down")
                threading.Event().wait(cut_s)  # the fault: the worker's host is cut off
                assert not moved or not is_alive(int(first.read_text()))  # fenced by now
                _ip("-n", ns, "link", "set", ns_if, "up")
                if moved:  # the worker comes back without the attempt; it runs again there
                    wait_until(lambda: _starts(marks)[1:], what="the task again",
                               timeout_s=120)
                (marks / "release").touch()
                assert job.wait(timeout=120)["state"] == "succeeded"
                task = job.tasks()[0]
                attempt = task["attempt_id"]
        finally:
            del os.environ["IRIS_KEYS_DIR"]
        starts = _starts(marks)
        assert starts[-1].name == f"start-{attempt}"
        if moved:
            assert len(starts) == 2 and task["preemptions"] == 1 and task["failures"] == 0
        else:
            assert len(starts) == 1 and task["preemptions"] == 0
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
