"""bench/fleet.py's figures of the controller's report fronts (controller/report_fronts.py):
the helper processes it started, read from /proc like the controller itself."""

from __future__ import annotations

from pathlib import Path

from bench import fleet


def front_pids(controller_pid: int) -> list[int]:
    """The controller's report fronts now: its children running iris.controller.report_front."""
    pids = []
    for task in Path(f"/proc/{controller_pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in map(int, children):
            try:
                if b"iris.controller.report_front" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.append(pid)
            except OSError:
                continue
    return sorted(pids)


def cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += fleet._cpu_s(pid)
        except OSError:  # it died: bench.fleet does not kill fronts, so that is a figure too
            continue
    return total


def rss_mb(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += fleet._rss_mb(pid)
        except OSError:
            continue
    return total
