"""deploy/: the worker unit and the startup script agree, and the units are valid systemd."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_worker_unit_file_matches_the_one_startup_script_installs():
    script = (DEPLOY / "worker-startup.sh").read_text()
    embedded = re.search(r"<<'UNIT'\n(.*?)^UNIT$", script, re.S | re.M).group(1)
    assert embedded == (DEPLOY / "systemd" / "iris-worker.service").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_units_verify_apart_from_the_missing_iris_binary():
    units = [str(p) for p in sorted((DEPLOY / "systemd").glob("*.service"))]
    out = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True,
                         timeout=60)
    problems = [line for line in (out.stdout + out.stderr).splitlines()
                if line.strip() and "/opt/iris/venv/bin/iris" not in line]
    assert problems == []
