"""A child whose launch was abandoned: forked, but never recorded as the attempt's leader.

A zygote that froze (or died) between its fork and its "started" reply leaves a child that
runs the task while the worker reports the attempt as failed to start, and the task is
retried beside it: two attempts of one task at once. The child therefore announces itself
in the attempt directory before any of the task's code, and the worker, giving up on a
launch, marks it abandoned and then kills whatever announced itself. The order on both
sides (announce then check; mark then look) means one of them sees the other: either the
worker finds the child and kills its session, or the child finds the mark and exits.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from iris.worker.cgroups import AttemptCgroup
from iris.worker.records import kill_and_wait, proc_start_ticks, session_members

_log = logging.getLogger(__name__)
_REMOVE_ROUNDS = 5  # each round kills what joined the cgroup since the last
SPAWNED_NAME = "spawned.pid"  # "<pid> <start ticks>", written by the child as it begins
ABANDONED_NAME = "launch_abandoned"  # written by the worker as it gives up on the launch


def record(attempt_dir: Path, pid: int) -> None:
    """Record `pid` as the launch's child (whole or absent to a reader). Both the worker
    and a zygote's child may record the same child at once: each writes its own file."""
    tmp = attempt_dir / f"{SPAWNED_NAME}.{os.getpid()}.tmp"
    tmp.write_text(f"{pid} {proc_start_ticks(pid) or 0}")
    os.rename(tmp, attempt_dir / SPAWNED_NAME)


def announce(attempt_dir: Path) -> bool:
    """In the new child, leading its own session: record it; False if the launch was
    abandoned meanwhile (the child must then exit without running anything)."""
    record(attempt_dir, os.getpid())
    return not (attempt_dir / ABANDONED_NAME).exists()


def reset(attempt_dir: Path) -> None:
    """Before a launch, and after its attempt ended: no mark of it left in the directory."""
    for name in (SPAWNED_NAME, ABANDONED_NAME):
        (attempt_dir / name).unlink(missing_ok=True)


def spawned(attempt_dir: Path) -> tuple[int, int] | None:
    """(pid, start ticks) of the child that announced itself, if one did."""
    try:
        pid, ticks = map(int, (attempt_dir / SPAWNED_NAME).read_text().split())
    except (OSError, ValueError):
        return None
    # ticks 0: it was gone as it was recorded, and its pid may since be another's
    return (pid, ticks) if ticks else None


def abandon(attempt_dir: Path, cgroup: AttemptCgroup | None, timeout_s: float) -> list[int]:
    """Mark the launch abandoned, kill the session of a child that announced itself, and
    everything in the cgroup, which is then removed: retried, as a child may join it between
    the kill and the removal; once it is gone, one that had not joined cannot, and exits
    before running anything. The pids still alive after `timeout_s` (stuck in the kernel)."""
    (attempt_dir / ABANDONED_NAME).touch()
    child = spawned(attempt_dir)  # None: none yet; one that comes sees the mark and exits
    survivors = kill_and_wait(session_members(*child), timeout_s) if child else []
    if cgroup is not None:
        for _ in range(_REMOVE_ROUNDS):
            if cgroup.remove():  # kills what is in it first
                break
        else:
            _log.warning("cgroup %s could not be removed after a failed launch", cgroup.path)
    return survivors
