"""Admission counts hand-started workers: a region's catalogue is its scale groups plus the
workers registered in it, through the CLI, on real processes (`iris controller serve
--config`, `iris worker`, `iris job run --dry-run`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(300)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp: Path, address: str) -> Path:
    path = tmp / "cluster.yaml"
    path.write_text(f"""
name: handmade
controller:
  address: {address}
storage:
  log_dir: {tmp / 'logs'}
regions:
  onprem:
    zones: [rack-1]
  cloud:
    zones: [cloud-a]
    scale_groups:
      tpus:
        accelerator_type: tpu
        accelerator_variant: v5litepod-4
        provider: simulated
""")
    return path


def _spawn(tmp: Path, name: str, *argv: str) -> subprocess.Popen:
    with open(tmp / f"{name}.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "iris", *argv], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, "PYTHONPATH": ROOT})


def _iris(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iris", *argv], capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": ROOT})


def test_a_job_that_fits_a_registered_worker_is_admitted_in_a_region_without_groups(
        tmp_path, wait_until):
    address = f"tcp://127.0.0.1:{_free_port()}"
    config = _config(tmp_path, address)
    procs = [_spawn(tmp_path, "controller", "controller", "serve", "--state-dir",
                    str(tmp_path / "state"), "--bind", address, "--config", str(config),
                    "--dashboard-port", "0")]
    try:
        dry = ("job", "run", "--address", address, "--dry-run", "--json")
        # Nothing registered yet: only the config's groups (TPUs) are on offer.
        refused = wait_until(lambda: (lambda r: r if "resources:" in r.stderr else None)(
            _iris(*dry, "--cpu", "0.5", "--", "true")), what="the controller answering")
        assert refused.returncode == 2
        assert "no scale group offers cpu-only hosts, nor does any registered worker " \
               "(offered: v5litepod-4)" in refused.stderr

        procs.append(_spawn(tmp_path, "worker", "worker", "--controller", address,
                            "--region", "onprem", "--attr", "cpu=2", "--attr",
                            "memory=2000000000", "--work-dir", str(tmp_path / "w"),
                            "--preemption-notice", "off"))
        wait_until(lambda: json.loads(_iris("worker", "list", "--address", address,
                                            "--json").stdout or "[]"),
                   what="the hand-started worker registered")
        fits = _iris(*dry, "--cpu", "0.5", "--", "true")
        assert fits.returncode == 0, fits.stderr
        assert json.loads(fits.stdout)["fits_now"] is True
        # Past what the worker offers: refused, naming the bound.
        too_big = _iris(*dry, "--cpu", "4", "--", "true")
        assert too_big.returncode == 2 and "cpu=4: the largest host offers 2" in too_big.stderr
        # And a real run on it.
        ran = _iris("job", "run", "--address", address, "--cpu", "0.5", "--", "echo", "hand")
        assert ran.returncode == 0 and "hand" in ran.stdout
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=60)
