"""What a restarted worker does with attempts its previous life left running: adopt or kill.

The previous worker's records (`attempt.json`) say what it started. A leader that still runs
with the recorded start time is that attempt; it is either adopted (re-attached: its output
FIFOs re-opened, its end watched, `stop` works) or killed with everything in its cgroup and
session. A record whose leader is gone is cleaned up: leftovers are killed, the cgroup and
record removed. The caller decides adopt-or-kill per record (for example: adopt only
attempts the controller still calls current).
"""

from __future__ import annotations

import enum
import logging
import os
import select
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.worker import halfborn
from iris.worker.cgroups import AttemptCgroup, CgroupVersion
from iris.worker.outcome import Outcome
from iris.worker.output import OnOutput, StreamReader, open_reader
from iris.worker.process import PENDING_CGROUP_NAME, AttemptProcess, AttemptSpec, PidfdLeader
from iris.worker.records import (
    AttemptRecord,
    is_alive,
    kill_and_wait,
    remove_record,
    session_members,
)

_log = logging.getLogger(__name__)
_KILL_WAIT_S = 10.0  # SIGKILL cannot be ignored; this bounds a process stuck in the kernel


class LeftoverAction(enum.Enum):
    ADOPTED = "adopted"  # still running, now watched by this worker
    KILLED = "killed"  # was running; killed with everything of it
    GONE = "gone"  # had already ended; its leftovers were cleaned up


@dataclass(frozen=True)
class Leftover:
    record: AttemptRecord
    action: LeftoverAction
    process: AttemptProcess | None = None  # set when ADOPTED


def _cgroup_of(record: AttemptRecord) -> AttemptCgroup | None:
    if not record.cgroup or not Path(record.cgroup).is_dir():
        return None
    return AttemptCgroup(path=Path(record.cgroup),
                         version=CgroupVersion(record.cgroup_version),
                         memory_limit_bytes=record.memory_limit_bytes)


def kill_leftovers(record: AttemptRecord, leader_alive: bool) -> None:
    """SIGKILL everything of a recorded attempt (its session and cgroup) and wait for it."""
    cgroup = _cgroup_of(record)
    pids = set(session_members(record.pid, record.start_ticks))
    if leader_alive:
        pids.add(record.pid)
    if cgroup is not None:
        pids.update(cgroup.pids())
    survivors = kill_and_wait(pids, _KILL_WAIT_S)
    if survivors:
        _log.warning("leftovers of %s/%s survived SIGKILL: %s", record.task_id,
                     record.attempt, survivors)
    if cgroup is not None and not cgroup.remove():
        _log.warning("leftover cgroup %s could not be removed", cgroup.path)
    for fifo in (record.stdout_fifo, record.stderr_fifo):
        Path(fifo).unlink(missing_ok=True)


def stop_recorded(attempt_dir: Path, grace_s: float) -> bool:
    """Stop a recorded attempt whose worker cannot (it died, or its lease lapsed): SIGTERM
    to its session, up to `grace_s` to exit, then SIGKILL to whatever is left. True if there
    was a record (the attempt is gone now)."""
    record = AttemptRecord.read(attempt_dir)
    if record is None:
        sweep_unrecorded(attempt_dir)
        return False
    if is_alive(record.pid, record.start_ticks):
        try:
            leader = os.pidfd_open(record.pid)
        except ProcessLookupError:
            leader = None
        if leader is not None:
            try:
                os.killpg(record.pid, signal.SIGTERM)
                select.select([leader], [], [], grace_s)  # readable once the leader exited
            except (ProcessLookupError, PermissionError):
                pass
            finally:
                os.close(leader)
    kill_leftovers(record, is_alive(record.pid, record.start_ticks))
    return True


def sweep_unrecorded(attempt_dir: Path) -> None:
    """The worker died between spawn and record, or during a failed launch's cleanup: the
    cgroup and the child that announced itself (halfborn.py) know the processes."""
    pending = attempt_dir / PENDING_CGROUP_NAME
    cgroup = None
    try:
        path = Path(pending.read_text().strip())
    except FileNotFoundError:
        path = None
    if path is not None and path.is_dir() and path.name.startswith("iris-"):
        version = CgroupVersion.V2 if (path / "memory.max").exists() else CgroupVersion.V1
        cgroup = AttemptCgroup(path=path, version=version, memory_limit_bytes=0)
    if attempt_dir.is_dir():  # kills and removes (halfborn.abandon warns if it cannot)
        survivors = halfborn.abandon(attempt_dir, cgroup, _KILL_WAIT_S)
        if survivors:
            _log.warning("unrecorded attempt in %s: %s survived SIGKILL", attempt_dir,
                         survivors)
    pending.unlink(missing_ok=True)


def adopt_or_kill(
    attempt_dir: Path,
    adopt: bool | Callable[[AttemptRecord], bool],
    on_output: OnOutput | None = None,
    *,
    cwd: Path | None = None,
    clock: Clock = SYSTEM_CLOCK,
    on_exit: Callable[[AttemptProcess, Outcome], None] | None = None,
) -> Leftover | None:
    """Deal with what the previous worker left in `attempt_dir`; None if nothing was left."""
    record = AttemptRecord.read(attempt_dir)
    if record is None:
        sweep_unrecorded(attempt_dir)
        return None
    alive = is_alive(record.pid, record.start_ticks)
    wanted = adopt(record) if callable(adopt) else adopt
    if alive and wanted:
        return Leftover(record, LeftoverAction.ADOPTED,
                        _adopt(attempt_dir, record, on_output, cwd, clock, on_exit))
    kill_leftovers(record, alive)
    remove_record(attempt_dir)
    (attempt_dir / PENDING_CGROUP_NAME).unlink(missing_ok=True)
    action = LeftoverAction.KILLED if alive else LeftoverAction.GONE
    _log.info("attempt %s/%s left by a previous worker: %s", record.task_id, record.attempt,
              action.value)
    return Leftover(record, action)


def _adopt(attempt_dir: Path, record: AttemptRecord, on_output: OnOutput | None,
           cwd: Path | None, clock: Clock,
           on_exit: Callable[[AttemptProcess, Outcome], None] | None) -> AttemptProcess:
    spec = AttemptSpec(task_id=record.task_id, attempt=record.attempt,
                       attempt_dir=attempt_dir, cwd=cwd or attempt_dir,
                       memory_limit_bytes=record.memory_limit_bytes)
    readers = [StreamReader(name, open_reader(Path(fifo)), on_output, clock).start()
               for name, fifo in (("stdout", record.stdout_fifo),
                                  ("stderr", record.stderr_fifo))]
    return AttemptProcess(spec, PidfdLeader(record.pid), record, _cgroup_of(record), readers,
                          clock, on_exit, adopted=True)


def adopt_or_kill_all(
    attempts_root: Path,
    adopt: bool | Callable[[AttemptRecord], bool],
    on_output_for: Callable[[AttemptRecord], OnOutput | None] | None = None,
    *,
    clock: Clock = SYSTEM_CLOCK,
) -> list[Leftover]:
    """`adopt_or_kill` for every attempt directory directly under `attempts_root`."""
    found = []
    if not attempts_root.is_dir():
        return found
    for child in sorted(attempts_root.iterdir()):
        record = AttemptRecord.read(child) if child.is_dir() else None
        if record is None:
            continue
        sink = on_output_for(record) if on_output_for else None
        leftover = adopt_or_kill(child, adopt, sink, clock=clock)
        if leftover is not None:
            found.append(leftover)
    return found
