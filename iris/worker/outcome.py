"""How an attempt ended, from its exit status: pure mapping, no processes, no I/O.

The worker reports one `Outcome` per attempt. The mapping follows shell conventions so that
a command task run through `sh` and a callable run directly read the same: a negative
returncode -N (killed by signal N) and 128+N from a shell are both "killed by signal N".
SIGKILL (137 / -9) inside a memory cgroup whose OOM counter moved is OUT OF MEMORY, the
case Ray users met as silent "worker died" errors.

`failure_line` is the one line a user reads about a failed attempt (`iris job status`,
`job.result()`): "exited with code 3", "killed by SIGTERM", "killed by SIGKILL: out of
memory (limit 2 GiB)".
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from iris.base.resources import human_bytes

_SHELL_SIGNAL_BASE = 128  # `sh` reports a child killed by signal N as exit code 128+N
_LAST_SIGNAL = 64  # Linux real-time signals end at 64; 128+65 and up are plain exit codes


class OutcomeKind(enum.Enum):
    SUCCEEDED = "succeeded"  # exit code 0
    FAILED = "failed"  # nonzero exit code from the task itself
    KILLED_BY_SIGNAL = "killed_by_signal"  # a signal ended it, not at our request
    OOM_KILLED = "oom_killed"  # the kernel killed it for exceeding its memory limit
    STOPPED = "stopped"  # it ended after the worker asked it to stop (preemption, kill)
    UNKNOWN = "unknown"  # adopted after a worker restart: the exit status died with that worker


@dataclass(frozen=True)
class Outcome:
    """One attempt's end. `exit_code` is the shell-style code (0-255), None if unknown."""

    kind: OutcomeKind
    exit_code: int | None = None
    signal: int | None = None
    detail: str = ""
    memory_limit_bytes: int = 0  # the attempt's memory limit (OOM lines name it); 0: none

    @property
    def ok(self) -> bool:
        return self.kind is OutcomeKind.SUCCEEDED


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def classify_exit(
    returncode: int,
    *,
    stop_requested: bool = False,
    oom_kills: int = 0,
    memory_limit_bytes: int = 0,
) -> Outcome:
    """Map a Popen-style returncode (negative = killed by that signal) to an Outcome.

    `oom_kills` is how many processes the attempt's memory cgroup saw the OOM killer end;
    `memory_limit_bytes` is 0 when no limit was set.
    """
    signum = None
    if returncode < 0:
        signum = -returncode
    elif _SHELL_SIGNAL_BASE < returncode <= _SHELL_SIGNAL_BASE + _LAST_SIGNAL:
        signum = returncode - _SHELL_SIGNAL_BASE
    code = _SHELL_SIGNAL_BASE + signum if signum is not None else returncode
    if oom_kills > 0 and returncode != 0:
        return Outcome(
            OutcomeKind.OOM_KILLED, code, signum,
            f"out of memory: exceeded its limit of {memory_limit_bytes} bytes "
            f"({oom_kills} process(es) killed by the OOM killer)", memory_limit_bytes,
        )
    if stop_requested:
        how = f"by {_signal_name(signum)}" if signum else f"with exit code {code}"
        return Outcome(OutcomeKind.STOPPED, code, signum, f"stopped on request; ended {how}")
    if code == 0:
        return Outcome(OutcomeKind.SUCCEEDED, 0, None, "")
    if signum is None:
        return Outcome(OutcomeKind.FAILED, code, None, f"exited with code {code}")
    detail = f"killed by {_signal_name(signum)}"
    if signum == signal.SIGKILL:
        detail += " (exit 137: killed, often by the out-of-memory killer)"
    return Outcome(OutcomeKind.KILLED_BY_SIGNAL, code, signum, detail)


def unknown_outcome(detail: str) -> Outcome:
    return Outcome(OutcomeKind.UNKNOWN, None, None, detail)


def failure_line(outcome: Outcome) -> str:
    """What ended a failed attempt, in one line that names its exit code or signal."""
    if outcome.kind is not OutcomeKind.OOM_KILLED:
        return outcome.detail or outcome.kind.value
    how = (f"killed by {_signal_name(outcome.signal)}" if outcome.signal
           else f"exited with code {outcome.exit_code}")
    limit = outcome.memory_limit_bytes
    return f"{how}: out of memory" + (f" (limit {human_bytes(limit)})" if limit else "")


