"""Reading what one attempt uses now, from /proc and its memory cgroup. No threads, no policy.

Not the sampler (usage_sampler.py decides when to read and what to send). An attempt's
processes are its cgroup's members where the host has cgroups (exact: it catches processes
that left the session), else its session's members (a scan of /proc). For each one line of
/proc/PID/stat gives both its CPU time (own and its reaped children's) and its resident
pages, so a reading costs one small file per process plus one for the cgroup's charge.

Readings are levels (RSS, bytes charged, the work directory's size) and one counter (CPU
seconds since the attempt started); a process that exited between the listing and the read
is skipped, as it would be a moment later.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from iris.worker.cgroups import AttemptCgroup
from iris.worker.records import session_members

# Both are fixed for the life of the machine (sysconf values, not state).
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
# /proc/PID/stat fields after the ")" that ends the command name: utime, stime, cutime,
# cstime (clock ticks) and rss (pages); proc(5) numbers them 14-17 and 24.
_UTIME, _RSS = 11, 21


@dataclass(frozen=True)
class ProcReading:
    """CPU seconds used by the processes read (and the children they reaped), their
    summed resident memory, and how many were read."""

    cpu_s: float
    rss_bytes: int
    processes: int


def attempt_pids(leader_pid: int, start_ticks: int, cgroup: AttemptCgroup | None) -> list[int]:
    """Every process of an attempt: its cgroup's members, else its session's."""
    if cgroup is not None:
        try:
            return cgroup.pids()
        except OSError:
            return []
    return session_members(leader_pid, start_ticks)


def read_procs(pids: list[int]) -> ProcReading:
    """Summed CPU seconds (own + reaped children) and RSS of `pids`; vanished ones skipped.
    A live child's time is counted once: cutime grows only when a child is reaped."""
    ticks = rss = seen = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        ticks += sum(int(x) for x in fields[_UTIME:_UTIME + 4])
        rss += int(fields[_RSS]) * _PAGE
        seen += 1
    return ProcReading(ticks / _CLK_TCK, rss, seen)


def dir_size(root: Path, max_entries: int) -> int:
    """Bytes in the files under `root` (not following links), looking at no more than
    `max_entries` entries: a task that writes a million small files gets a lower bound,
    never a sampler stuck walking them."""
    total, seen, stack = 0, 0, [str(root)]
    while stack and seen < max_entries:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
                if seen >= max_entries:
                    break
    return total


class GpuBusy:
    """GPU utilization by device index, from `nvidia-smi` where there is one (None where not:
    a TPU VM, or a host without NVIDIA's tools). One call reads every GPU of the host."""

    def __init__(self, program: str | None = None, timeout_s: float = 5.0):
        self._program = program or shutil.which("nvidia-smi")
        self._timeout_s = timeout_s

    @property
    def available(self) -> bool:
        return self._program is not None

    def read(self) -> dict[int, float]:
        """{device index: busy fraction 0..1}; empty when it cannot be read."""
        if self._program is None:
            return {}
        try:
            out = subprocess.run([self._program, "--query-gpu=index,utilization.gpu",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=self._timeout_s, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            return {}
        busy = {}
        for line in out.splitlines():
            index, _, percent = line.partition(",")
            try:
                busy[int(index)] = min(1.0, max(0.0, float(percent) / 100.0))
            except ValueError:
                continue
        return busy
