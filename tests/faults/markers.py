"""Tasks that mark their start (with their pid) and wait to be released, for the fault tests:
from the markers a test sees which attempts ran, in what order, and whether one still lives."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def hold(marker_dir: str, name: str = "task") -> str:
    """Write start-NAME-ATTEMPT (holding this process's pid), then wait for `release`."""
    attempt = os.environ["IRIS_ATTEMPT_ID"]
    Path(marker_dir, f"start-{name}-{attempt}").write_text(str(os.getpid()))
    gate = threading.Event()
    while not Path(marker_dir, "release").exists() and not gate.wait(0.05):
        pass
    return attempt


def starts(marker_dir: Path, name: str = "task") -> list[Path]:
    """The start markers of `name`, oldest first."""
    return sorted(Path(marker_dir).glob(f"start-{name}-*"), key=lambda p: p.stat().st_mtime)
