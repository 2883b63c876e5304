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


def hold_checking_overlap(marker_dir: str, name: str = "gang") -> str:
    """Like `hold`, named by task index, and at start look for a live earlier attempt of the
    same task: it writes overlap-NAME-INDEX if one still runs. Checked at the moment this
    attempt starts, which is when an overlap would begin."""
    index, attempt = os.environ["IRIS_TASK_INDEX"], os.environ["IRIS_ATTEMPT_ID"]
    for earlier in Path(marker_dir).glob(f"start-{name}-{index}-*"):
        pid = int(earlier.read_text() or 0)
        if pid and Path(f"/proc/{pid}").exists() and _runs(pid):
            Path(marker_dir, f"overlap-{name}-{index}").write_text(earlier.name)
    Path(marker_dir, f"start-{name}-{index}-{attempt}").write_text(str(os.getpid()))
    gate = threading.Event()
    while not Path(marker_dir, "release").exists() and not gate.wait(0.05):
        pass
    return attempt


def _runs(pid: int) -> bool:
    """A live, non-zombie process (the state letter follows the ')' in /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def hold_with_slow_goodbye(marker_dir: str, name: str = "patient",
                           goodbye_s: float = 3.0) -> str:
    """`hold_checking_overlap`, with an on_preempt callback that takes `goodbye_s` (a task
    writing its checkpoint when told to stop), marking when it ends."""
    import iris  # in the task's process

    attempt = os.environ["IRIS_ATTEMPT_ID"]

    def goodbye() -> None:
        threading.Event().wait(goodbye_s)
        Path(marker_dir, f"goodbye-{name}-{attempt}").touch()

    iris.on_preempt(goodbye)
    return hold_checking_overlap(marker_dir, name)
