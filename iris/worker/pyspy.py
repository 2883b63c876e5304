"""Stacks and sampling profiles of a task's Python processes, through py-spy. Blocking; no
policy. Not the actor that serves them (inspector.py).

py-spy reads a live interpreter's memory from outside (ptrace; the worker runs as root, or
with CAP_SYS_PTRACE), so the task needs nothing installed and is not paused for long: a
`dump` stops it for the moment it takes to read the stacks (~0.25 s for 50 threads here),
and `record` runs `--nonblocking` (never stops the task; a rare torn sample is the price).
py-spy ships as a wheel with its binary; the worker finds it beside its own interpreter.

A task that exits while it is profiled ends the recording early: py-spy writes what it has,
and `record` says so in its note.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from iris.base.errors import IrisError

# A dump of one process answers in well under a second; a stuck ptrace must not hold the
# caller past this.
_DUMP_TIMEOUT_S = 20.0
# py-spy needs a moment after the end of a recording to write its file.
_RECORD_SLACK_S = 30.0
_SAMPLES = re.compile(r"Samples: (\d+)")
_NOT_PYTHON = ("Failed to find python version", "No python processes found",
               "Failed to get process executable name", "not a python")


class ProfilerMissingError(IrisError):
    """py-spy is not installed where the worker can run it."""


@dataclass(frozen=True)
class ProcessStack:
    pid: int
    command: str
    python: bool  # False: not a Python process (its stack is not Python's)
    text: str  # py-spy's dump, or why there is none


@dataclass(frozen=True)
class Recording:
    folded: str  # "frame;frame;frame count" lines (py-spy's raw format)
    samples: int
    seconds: float  # asked for
    ended_early: bool  # the task exited before the time was up: a partial profile
    note: str


def binary() -> str:
    """py-spy beside this interpreter (its wheel's script), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("py-spy")
    if found is None:
        raise ProfilerMissingError("py-spy is not installed on this worker (pip install "
                                   "py-spy next to iris)")
    return found


def command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def dump(pids: list[int]) -> list[ProcessStack]:
    """Every thread's Python stack of each process, read in parallel. A process py-spy
    cannot pause (one already stopped, by SIGSTOP or a debugger) is read without pausing."""
    exe = binary()
    first = _dump_all(exe, pids, ())
    again = [pid for pid, (code, text) in first.items()
             if code != 0 and "suspend" in text]
    first.update(_dump_all(exe, again, ("--nonblocking",)))
    out = []
    for pid in pids:
        code, text = first[pid]
        python = code == 0
        if not python:
            text = "(not a Python process)" if any(m in text for m in _NOT_PYTHON) \
                else _error_only(text)
        out.append(ProcessStack(pid, command_of(pid), python, text.strip()))
    return out


def _dump_all(exe: str, pids: list[int], extra: tuple[str, ...]) -> dict[int, tuple[int, str]]:
    running = [(pid, subprocess.Popen([exe, "dump", *extra, "--pid", str(pid)],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, text=True))
               for pid in pids]
    out = {}
    for pid, proc in running:
        try:
            text, _ = proc.communicate(timeout=_DUMP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            text = f"py-spy did not answer within {_DUMP_TIMEOUT_S:g} s"
        out[pid] = (proc.returncode, text)
    return out


def _error_only(text: str) -> str:
    """py-spy's error without the Rust backtrace it prints after it."""
    return text.split("Stack backtrace:", 1)[0].strip() or text


def _count(folded: str) -> int:
    """Samples in folded stacks: the count that ends each line."""
    total = 0
    for line in folded.splitlines():
        count = line.rpartition(" ")[2]
        total += int(count) if count.isdigit() else 0
    return total


def record(pid: int, seconds: float, rate: int, workdir: Path) -> Recording:
    """A `seconds`-long sampling profile of `pid` and its subprocesses, folded stacks."""
    exe = binary()
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="profile-") as scratch:
        out = Path(scratch) / "profile.txt"
        argv = [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                "--rate", str(rate), "--format", "raw", "--nonblocking", "--subprocesses",
                "--output", str(out)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=seconds + _RECORD_SLACK_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise IrisError(f"py-spy did not finish a {seconds:g} s profile") from exc
        said = done.stdout + done.stderr
        folded = out.read_text(errors="replace") if out.exists() else ""
    if not folded and done.returncode != 0:
        last = said.strip().splitlines()[-1] if said.strip() else f"exit {done.returncode}"
        raise IrisError(f"py-spy could not profile process {pid}: {last}")
    match = _SAMPLES.search(said)
    samples = int(match.group(1)) if match else _count(folded)
    early = "process exited" in said
    note = (f"the task exited during the profile: partial profile, {samples} samples"
            if early else f"{samples} samples over {seconds:g} s at {rate}/s")
    return Recording(folded, samples, seconds, early, note)
