"""The on-disk record of a running attempt, and /proc facts about processes: no policy.

A worker writes `attempt.json` into each attempt directory once the process runs and
deletes it when the attempt is over, so a restarted worker finds exactly what it left
running. A pid alone is not an identity (pids are reused), so the record also keeps the
kernel's start time of the process (field 22 of /proc/PID/stat, in clock ticks since boot).
"""

from __future__ import annotations

import json
import os
import select
import signal
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

RECORD_NAME = "attempt.json"


@dataclass(frozen=True)
class AttemptRecord:
    task_id: str
    attempt: int
    pid: int  # also the process group and session id: the attempt leads its own session
    start_ticks: int
    cgroup: str | None  # path of the attempt's cgroup, None where cgroups are unavailable
    cgroup_version: str | None
    memory_limit_bytes: int
    stdout_fifo: str
    stderr_fifo: str
    started_wall: float

    def write(self, attempt_dir: Path) -> None:
        tmp = attempt_dir / (RECORD_NAME + ".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, attempt_dir / RECORD_NAME)  # atomic: a reader sees all or nothing

    @classmethod
    def read(cls, attempt_dir: Path) -> AttemptRecord | None:
        try:
            data = json.loads((attempt_dir / RECORD_NAME).read_text())
        except FileNotFoundError:
            return None
        return cls(**data)


def remove_record(attempt_dir: Path) -> None:
    try:
        (attempt_dir / RECORD_NAME).unlink()
    except FileNotFoundError:
        pass


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) is in parentheses and may hold spaces or ')': split after the last one
    return text[text.rindex(")") + 2:].split()


def proc_start_ticks(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot, None if no such process."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: int, start_ticks: int | None = None) -> bool:
    """True if `pid` runs (not a zombie) and, when given, started at `start_ticks`."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start_ticks is None or int(fields[19]) == start_ticks


def session_members(sid: int, not_before_ticks: int = 0) -> list[int]:
    """Live processes of session `sid` started no earlier than `not_before_ticks` (the
    leader's start), which guards against a reused session id."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or fields[0] in ("Z", "X"):
            continue
        if int(fields[3]) == sid and int(fields[19]) >= not_before_ticks:
            members.append(int(entry.name))
    return members


def kill_and_wait(pids: Iterable[int], timeout_s: float) -> list[int]:
    """SIGKILL `pids` and wait until each has died; the pids still alive at the timeout.

    Through pidfds, so a pid reused meanwhile is never signalled, and "died" means the
    kernel finished its exit (a plain kill() returns before that: seen as a flaky test).
    """
    fds = []
    for pid in set(pids):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            os.close(fd)
            continue
        fds.append((fd, pid))
    try:
        waiting = {fd: pid for fd, pid in fds}
        while waiting:
            ready, _, _ = select.select(list(waiting), [], [], timeout_s)
            if not ready:
                break
            for fd in ready:
                del waiting[fd]
        return sorted(waiting.values())
    finally:
        for fd, _ in fds:
            os.close(fd)
