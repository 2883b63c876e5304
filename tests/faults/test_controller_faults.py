"""Faults of the controller, on real processes: clients ride through its restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import iris

pytestmark = pytest.mark.slow


def hold(marker_dir: str) -> str:
    attempt = os.environ["IRIS_ATTEMPT_ID"]
    Path(marker_dir, f"start-{attempt}").write_text(str(os.getpid()))
    gate = threading.Event()
    while not Path(marker_dir, "release").exists() and not gate.wait(0.05):
        pass
    return attempt


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _controller(state_dir: Path, address: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "iris", "controller", "serve",
                             "--state-dir", str(state_dir), "--bind", address],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    assert proc.stdout.readline().startswith("controller serving at")
    return proc


def test_a_client_waits_through_a_controller_restart(tmp_path, wait_until, capfd):
    address = f"tcp://127.0.0.1:{_free_port()}"
    controller = _controller(tmp_path / "state", address)
    worker = subprocess.Popen([sys.executable, "-m", "iris", "worker", "--controller", address,
                               "--work-dir", str(tmp_path / "w")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with iris.connect(address):
            job = iris.submit(hold, str(tmp_path))
            wait_until(lambda: list(tmp_path.glob("start-*")), what="the task running")
            os.killpg(controller.pid, signal.SIGKILL)
            controller.wait(30)
            answers: list = []
            asking = threading.Thread(target=lambda: answers.append(job.status()))
            asking.start()  # while nothing listens at the address
            wait_until(lambda: "waiting for the controller" in capfd.readouterr().err,
                       what="the client saying what it waits for")
            controller = _controller(tmp_path / "state", address)
            asking.join(120)
            assert answers and answers[0]["state"] == "running"
            (tmp_path / "release").touch()
            attempt = job.result(timeout=120)
        assert [p.name for p in tmp_path.glob("start-*")] == [f"start-{attempt}"]
    finally:
        for proc in (controller, worker):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            proc.wait(60)
