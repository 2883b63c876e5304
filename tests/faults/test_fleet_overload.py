"""No death spiral: a real controller holding 300 simulated hosts (bench/_fleet_hosts.py: a
socket each, the real protocol, a worker's timeouts and back-off) is frozen for longer than
the silence rule. When it runs again it blames no host for its own stall, every host is
still listed, no host was told to re-register, and a job runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import iris
from iris.client.jobs import _controller
from iris.wire.fencing import SILENT_LOST_S
from tests.cluster.test_crashes import free_port, start_controller

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
HOSTS = 300


def _hosts(address: str, state: Path) -> subprocess.Popen:
    token = (state / "cluster.token").read_text().strip()
    return subprocess.Popen(
        [sys.executable, "-m", "bench._fleet_hosts", address, "0", str(HOSTS), "600"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
        env={**os.environ, "IRIS_CLUSTER_TOKEN": token})


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGCONT)  # a frozen one must run to stop
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(60)


def test_a_controller_frozen_past_the_silence_rule_loses_no_host_and_recovers(
        tmp_path, wait_until):
    address = f"tcp://127.0.0.1:{free_port()}"
    controller = start_controller(tmp_path / "state", address)
    hosts = _hosts(address, tmp_path / "state")
    try:
        with iris.connect(address) as ctx:
            def listed() -> int:
                return len(_controller(ctx, "list_workers", timeout_s=120))

            wait_until(lambda: listed() == HOSTS, 180, f"{HOSTS} hosts registered",
                       explain=lambda: f"{listed()} listed")
            os.kill(controller.pid, signal.SIGSTOP)  # overloaded, swapped out, a stalled VM
            threading.Event().wait(SILENT_LOST_S + 5)  # every host silent past the rule
            os.kill(controller.pid, signal.SIGCONT)
            job = iris.submit(["true"], name="after-the-freeze")
            assert job.wait(timeout=180)["state"] == "succeeded", job.status()
            assert listed() == HOSTS
        hosts.send_signal(signal.SIGTERM)  # the helper prints its figures and exits
        out, _ = hosts.communicate(timeout=60)
        figures = json.loads(out.strip().splitlines()[-1])
        assert figures["reregister"] == 0  # the controller never dropped a live host
        assert figures["attempts"] >= 1
    finally:
        _stop(hosts)
        _stop(controller)
