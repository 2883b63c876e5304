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

# The soak tier (tests/README.md): each waits out the silence rule or a 40 s stall with 300
# simulated hosts, ~40 s apiece; CI runs them after the main suite.
pytestmark = [pytest.mark.slow, pytest.mark.soak]
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


class _Throttle(threading.Thread):
    """Gives a process RUN_S of every PERIOD_S (SIGSTOP / SIGCONT): a controller with a few
    percent of a core, far past what 300 hosts' registrations and reports need of it."""

    RUN_S, PERIOD_S = 0.01, 0.2

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.done = pid, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            os.kill(self.pid, signal.SIGSTOP)
            self.done.wait(self.PERIOD_S - self.RUN_S)
            os.kill(self.pid, signal.SIGCONT)
            self.done.wait(self.RUN_S)
        os.kill(self.pid, signal.SIGCONT)


def test_a_controller_starved_of_cpu_while_its_fleet_registers_degrades_and_recovers(
        tmp_path, wait_until):
    """Past its limit, not frozen: 300 hosts register and report while the controller gets
    ~5 % of a core for 40 s. Registrations and reports wait (later, slower), but no live host
    is dropped or told to re-register, and once the starvation ends every host is listed
    and jobs run."""
    address = f"tcp://127.0.0.1:{free_port()}"
    controller = start_controller(tmp_path / "state", address)
    throttle = _Throttle(controller.pid)
    throttle.start()
    hosts = _hosts(address, tmp_path / "state")
    try:
        threading.Event().wait(40)  # registrations and reports pile up behind the stall
        throttle.done.set()
        throttle.join()
        with iris.connect(address) as ctx:
            def listed() -> int:
                return len(_controller(ctx, "list_workers", timeout_s=120))

            wait_until(lambda: listed() == HOSTS, 240, f"{HOSTS} hosts registered",
                       explain=lambda: f"{listed()} listed")
            for i in range(3):
                job = iris.submit(["true"], name=f"after-the-starvation-{i}")
                assert job.wait(timeout=180)["state"] == "succeeded", job.status()
            assert listed() == HOSTS
        hosts.send_signal(signal.SIGTERM)
        out, _ = hosts.communicate(timeout=60)
        figures = json.loads(out.strip().splitlines()[-1])
        assert figures["reregister"] == 0  # the controller never dropped a live host
        assert figures["attempts"] >= 3
    finally:
        throttle.done.set()
        _stop(hosts)
        _stop(controller)
