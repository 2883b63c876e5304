"""One task attempt as an isolated process tree: spawn, capture, stop, reap. No scheduling.

Each attempt leads its own session and process group (so one signal reaches all of it),
runs in its own working directory, and sits in its own memory cgroup where the host has
cgroups (so a process that even left the session is still found and killed). Stop is
SIGTERM to the group, a grace period in which the task may checkpoint (see
`iris.worker.task_runtime.on_preempt`), then SIGKILL to everything of the attempt. When the
leading process exits, whatever it left behind is killed too: nothing of an attempt
outlives it.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import IrisError
from iris.base.ids import new_id
from iris.worker import halfborn
from iris.worker.cgroups import AttemptCgroup, CgroupHost, join_then_exec_argv
from iris.worker.outcome import Outcome, classify_exit, unknown_outcome
from iris.worker.output import MergedReader, OnOutput, make_fifo, open_reader
from iris.worker.records import (
    AttemptRecord,
    kill_and_wait,
    proc_start_ticks,
    remove_record,
    session_members,
)

_log = logging.getLogger(__name__)
DEFAULT_GRACE_S = 10.0  # the default: long enough to write a small checkpoint
_KILL_WAIT_S = 10.0  # SIGKILL is not ignorable; only a process stuck in the kernel (D) lasts
_DRAIN_TIMEOUT_S = 10.0  # output still unread this long after the kill comes from an escapee
PENDING_CGROUP_NAME = "cgroup.path"  # written before spawn; the record comes after it


class AttemptStartError(IrisError):
    """The attempt's process could not be started (bad program, cwd, or cgroup).
    `exit_code` follows the shell: 127 for a command not found, 126 for one not executable."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


# Written into the attempt directory just before the worker's own SIGTERM.
STOP_MARKER = "stop_requested"
# Written by a callable task's runtime as it exits (task_runtime.record_exit): its code when
# the process cannot be reaped here (its zygote died; adopted after a worker restart).
EXIT_CODE_NAME = "exit_code"


@dataclass(frozen=True)
class AttemptSpec:
    """What to run an attempt in. `env` is the complete environment (nothing inherited)."""

    task_id: str
    attempt: int
    attempt_dir: Path  # holds the record and the output FIFOs; created if missing
    cwd: Path  # the task's working directory
    env: Mapping[str, str] = field(default_factory=dict)
    memory_limit_bytes: int = 0  # 0: no limit

    def runtime_env(self) -> dict[str, str]:
        env = dict(self.env)
        env.update(IRIS_TASK_ID=self.task_id, IRIS_ATTEMPT=str(self.attempt),
                   IRIS_ATTEMPT_DIR=str(self.attempt_dir))
        return env


class Leader(Protocol):
    """The attempt's leading process, however it was started."""

    pid: int

    def wait_returncode(self) -> int | None:
        """Block until it exits; Popen-style returncode, or None if it cannot be known."""


@dataclass(frozen=True)
class ExitUsage:
    """What the kernel said about an attempt as it ended: CPU seconds of the leader and the
    descendants it reaped, and its resident high-water mark (wait4's rusage); the memory
    cgroup's high-water mark (read before the cgroup is removed). None: not known."""

    cpu_s: float | None = None
    maxrss_bytes: int | None = None
    peak_memory_bytes: int | None = None


def rusage_of(usage: object) -> tuple[float, int]:
    """(CPU seconds, max RSS bytes) from a resource.struct_rusage (ru_maxrss is in KiB)."""
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024  # type: ignore[attr-defined]


class _PopenLeader:
    def __init__(self, popen: subprocess.Popen):
        self._popen = popen
        self.pid = popen.pid
        self.rusage: tuple[float, int] | None = None

    def wait_returncode(self) -> int | None:
        # wait4, not Popen.wait: the rusage is the attempt's CPU time and memory peak.
        try:
            _, status, usage = os.wait4(self.pid, 0)
        except ChildProcessError:  # reaped elsewhere (never here): Popen knows the code
            return self._popen.wait()
        self.rusage = rusage_of(usage)
        self._popen.returncode = os.waitstatus_to_exitcode(status)
        return self._popen.returncode


class PidfdLeader:
    """A process that is not our child (adopted): we can see it end, not its status."""

    def __init__(self, pid: int):
        self.pid = pid

    def wait_returncode(self) -> int | None:
        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return None
        try:
            select.select([fd], [], [])
        finally:
            os.close(fd)
        return None


Spawner = Callable[[AttemptSpec, int, int, AttemptCgroup | None], Leader]
"""spawn(spec, stdout_fd, stderr_fd, cgroup) -> the started leader (in its own session,
already in `cgroup` before user code runs)."""


def check_program(program: str, spec: AttemptSpec) -> None:
    """Refuse a program that cannot run, naming it and nothing of ours: started through the
    cgroup's `sh` wrapper, a missing program read "/sys/fs/cgroup/.../cgroup.procs: 1: exec:
    nonexistent: not found" (issue 18)."""
    if "/" in program:
        path = Path(program) if os.path.isabs(program) else spec.cwd / program
        if not path.is_file():
            raise AttemptStartError(f"command not found: {program}", exit_code=127)
        if not os.access(path, os.X_OK):
            raise AttemptStartError(f"permission denied: {program} is not executable",
                                    exit_code=126)
    elif shutil.which(program, path=spec.env.get("PATH", os.defpath)) is None:
        raise AttemptStartError(f"command not found: {program}", exit_code=127)


def popen_spawner(argv: list[str]) -> Spawner:
    """Spawn `argv` as a subprocess (the command path, and callables without a zygote)."""
    if not argv:
        raise AttemptStartError("empty command")

    def spawn(spec: AttemptSpec, out_fd: int, err_fd: int, cg: AttemptCgroup | None) -> Leader:
        check_program(argv[0], spec)
        full = join_then_exec_argv(cg.procs_file, argv) if cg else list(argv)
        try:
            popen = subprocess.Popen(
                full, cwd=spec.cwd, env=spec.runtime_env(), stdin=subprocess.DEVNULL,
                stdout=out_fd, stderr=err_fd, start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            raise AttemptStartError(f"cannot start {argv[0]!r}: {exc}") from exc
        return _PopenLeader(popen)

    return spawn


class AttemptProcess:
    """A running attempt. Thread-safe: `stop` and `wait` may be called from any thread."""

    def __init__(self, spec: AttemptSpec, leader: Leader, record: AttemptRecord,
                 cgroup: AttemptCgroup | None, readers: list[MergedReader], clock: Clock,
                 on_exit: Callable[[AttemptProcess, Outcome], None] | None, adopted: bool):
        self.spec = spec
        self.record = record
        self.adopted = adopted
        self._leader = leader
        self._cgroup = cgroup
        self._readers = readers
        self._clock = clock
        self._on_exit = on_exit
        self._stop_requested = False
        self._done = threading.Event()
        self._outcome: Outcome | None = None
        self.exit_usage = ExitUsage()  # filled in as it ends, before on_exit runs
        self._watcher = threading.Thread(target=self._watch, daemon=True,
                                         name=f"iris-attempt-{spec.task_id}-{spec.attempt}")
        self._watcher.start()

    @property
    def pid(self) -> int:
        return self._leader.pid

    @property
    def pgid(self) -> int:
        return self._leader.pid  # start_new_session: the leader's pid is its group's id

    @property
    def cgroup(self) -> AttemptCgroup | None:
        """Its memory cgroup (None where the host has none): what it is charged, its pids."""
        return self._cgroup

    @property
    def memory_limit_enforced(self) -> bool:
        return self._cgroup is not None and self._cgroup.memory_limit_bytes > 0

    @classmethod
    def start(cls, spec: AttemptSpec, argv: list[str], on_output: OnOutput | None = None, *,
              cgroups: CgroupHost | None = None, clock: Clock = SYSTEM_CLOCK,
              on_exit: Callable[[AttemptProcess, Outcome], None] | None = None,
              ) -> AttemptProcess:
        """Start `argv` for `spec`; output lines go to `on_output` as they come."""
        return cls.launch(spec, popen_spawner(argv), on_output, cgroups=cgroups, clock=clock,
                          on_exit=on_exit)

    @classmethod
    def launch(cls, spec: AttemptSpec, spawn: Spawner, on_output: OnOutput | None = None, *,
               cgroups: CgroupHost | None = None, clock: Clock = SYSTEM_CLOCK,
               on_exit: Callable[[AttemptProcess, Outcome], None] | None = None,
               ) -> AttemptProcess:
        """Start an attempt with any spawner (subprocess or zygote). A launch that fails
        leaves no process of the attempt behind, not even one forked by a zygote that froze
        before it could say so (`_abandon`)."""
        if not spec.cwd.is_dir():
            raise AttemptStartError(f"working directory {spec.cwd} does not exist")
        spec.attempt_dir.mkdir(parents=True, exist_ok=True)
        halfborn.reset(spec.attempt_dir)
        cgroup = cls._make_cgroup(spec, cgroups)
        if cgroup is not None:  # found by a restarted worker if we die before the record
            (spec.attempt_dir / PENDING_CGROUP_NAME).write_text(str(cgroup.path))
        fifos = [spec.attempt_dir / f"{name}.fifo" for name in ("stdout", "stderr")]
        child_fds: list[int] = []
        reader_fds: list[int] = []
        try:
            for fifo in fifos:
                fifo.unlink(missing_ok=True)
                child_fds.append(make_fifo(fifo))
                reader_fds.append(open_reader(fifo))
            leader = spawn(spec, child_fds[0], child_fds[1], cgroup)
            record = cls._record(spec, leader, cgroup, fifos, clock)
        except BaseException:
            for fd in reader_fds:
                os.close(fd)
            _abandon(spec, cgroup)
            raise
        finally:
            for fd in child_fds:
                os.close(fd)  # the child holds its own copies; ours would block EOF
        # One reader for both pipes: lines keep the order they were written in (output.py).
        readers = [MergedReader(list(zip(("stdout", "stderr"), reader_fds, strict=True)),
                                on_output, clock).start()]
        return cls(spec, leader, record, cgroup, readers, clock, on_exit, adopted=False)

    @staticmethod
    def _record(spec: AttemptSpec, leader: Leader, cgroup: AttemptCgroup | None,
                fifos: list[Path], clock: Clock) -> AttemptRecord:
        """Write the started attempt's record (a leader that outlives a failure here is
        killed by `_abandon`: it announced itself, or sits in the cgroup)."""
        if not halfborn.spawned(spec.attempt_dir):  # a command: announced here, not by it
            halfborn.record(spec.attempt_dir, leader.pid)
        record = AttemptRecord(
            task_id=spec.task_id, attempt=spec.attempt, pid=leader.pid,
            start_ticks=proc_start_ticks(leader.pid) or 0,
            cgroup=str(cgroup.path) if cgroup else None,
            cgroup_version=cgroup.version.value if cgroup else None,
            memory_limit_bytes=spec.memory_limit_bytes, stdout_fifo=str(fifos[0]),
            stderr_fifo=str(fifos[1]), started_wall=clock.wall(),
        )
        record.write(spec.attempt_dir)
        return record

    @staticmethod
    def _make_cgroup(spec: AttemptSpec, cgroups: CgroupHost | None) -> AttemptCgroup | None:
        if cgroups is None:
            if spec.memory_limit_bytes:
                _log.warning("task %s attempt %s: memory limit of %d bytes NOT enforced "
                             "(no cgroups on this host)", spec.task_id, spec.attempt,
                             spec.memory_limit_bytes)
            return None
        try:
            return cgroups.create(f"iris-{new_id()}", spec.memory_limit_bytes)
        except IrisError as exc:
            raise AttemptStartError(str(exc)) from exc

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> Outcome:
        """SIGTERM the group, wait up to `grace_s`, then SIGKILL everything; the outcome."""
        if grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s}")
        if not self._done.is_set():
            self._stop_requested = True
            try:  # tells the task's SIGTERM handler no notice is coming (task_runtime)
                (self.spec.attempt_dir / STOP_MARKER).touch()
            except OSError:
                pass
            self._signal_group(signal.SIGTERM)
            if not self._done.wait(grace_s):
                self._kill_everything()
        self._done.wait()
        assert self._outcome is not None
        return self._outcome

    def wait(self, timeout: float | None = None) -> Outcome | None:
        """The outcome once the attempt is over; None if `timeout` seconds pass first."""
        if not self._done.wait(timeout):
            return None
        return self._outcome

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_everything(self) -> None:
        self._signal_group(signal.SIGKILL)
        # Session members plus the cgroup's list (a process may have left the session). Using
        # the cgroup list alone would save the /proc scan (1.5 ms per attempt with ~90
        # processes) but hung a loaded test run once; kept as it was until that is understood.
        pids = set(session_members(self.pid, self.record.start_ticks))
        if self._cgroup is not None:
            pids.update(self._cgroup.pids())
        survivors = kill_and_wait(pids, _KILL_WAIT_S)
        if survivors:
            _log.warning("attempt %s/%s: %s survived SIGKILL for %s s", self.spec.task_id,
                         self.spec.attempt, survivors, _KILL_WAIT_S)
        if self._cgroup is not None:
            self._cgroup.kill_all()  # anything forked while we were killing

    def _watch(self) -> None:
        try:
            self._finish(self._leader.wait_returncode())
        except Exception as exc:  # `done` must be set whatever happens, or stop() hangs
            _log.exception("attempt %s/%s: cleanup failed", self.spec.task_id,
                           self.spec.attempt)
            if self._outcome is None:
                self._outcome = unknown_outcome(f"cleanup failed: {exc}")
        finally:
            self._done.set()

    def _finish(self, returncode: int | None) -> None:
        self._kill_everything()  # leftovers of a leader that exited (or was killed)
        for reader in self._readers:
            if not reader.join(_DRAIN_TIMEOUT_S):
                _log.warning("attempt %s/%s: %s still open after the kill (a process "
                             "escaped); giving up on it", self.spec.task_id,
                             self.spec.attempt, reader.name)
        oom_kills = self._cgroup.oom_kills() if self._cgroup else 0
        rusage = getattr(self._leader, "rusage", None)
        self.exit_usage = ExitUsage(
            cpu_s=rusage[0] if rusage else None, maxrss_bytes=rusage[1] if rusage else None,
            peak_memory_bytes=self._cgroup.memory_peak() if self._cgroup else None)
        if self._cgroup is not None and not self._cgroup.remove():
            _log.warning("cgroup %s could not be removed", self._cgroup.path)
        if returncode is None:
            returncode = _recorded_exit(self.spec.attempt_dir)
        if returncode is None:
            outcome = unknown_outcome("exit status unknown: not a child of this worker "
                                      "(adopted after a worker restart, or its zygote died)")
            if self._stop_requested:
                outcome = unknown_outcome("stopped on request after adoption")
        else:
            outcome = classify_exit(returncode, stop_requested=self._stop_requested,
                                    oom_kills=oom_kills,
                                    memory_limit_bytes=self.spec.memory_limit_bytes)
        for fifo in (self.record.stdout_fifo, self.record.stderr_fifo):
            Path(fifo).unlink(missing_ok=True)
        remove_record(self.spec.attempt_dir)
        halfborn.reset(self.spec.attempt_dir)
        (self.spec.attempt_dir / PENDING_CGROUP_NAME).unlink(missing_ok=True)
        (self.spec.attempt_dir / EXIT_CODE_NAME).unlink(missing_ok=True)
        self._outcome = outcome
        if self._on_exit is not None:  # before `done`: when wait() returns, it has run
            try:
                self._on_exit(self, outcome)
            except Exception:
                _log.exception("on_exit callback failed")


def _abandon(spec: AttemptSpec, cgroup: AttemptCgroup | None) -> None:
    """Kill whatever a failed launch started (halfborn.py) and remove its cgroup."""
    survivors = halfborn.abandon(spec.attempt_dir, cgroup, _KILL_WAIT_S)
    if survivors:
        _log.warning("attempt %s/%s: %s survived SIGKILL after a failed launch",
                     spec.task_id, spec.attempt, survivors)
    (spec.attempt_dir / PENDING_CGROUP_NAME).unlink(missing_ok=True)


def _recorded_exit(attempt_dir: Path) -> int | None:
    """The exit code a callable task's runtime left as it exited (EXIT_CODE_NAME); None if
    it left none (a command, or killed before it could)."""
    try:
        return int((attempt_dir / EXIT_CODE_NAME).read_text())
    except (OSError, ValueError):
        return None
