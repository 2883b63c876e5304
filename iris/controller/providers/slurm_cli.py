"""Slurm's client commands for one site, and the parsing of what they print. No decisions.

Not the provider (slurm.py maps jobs onto slices). Each command is one subprocess with a
timeout, run with the site's SLURM_CONF; `calls` counts them per command, so a caller can
show how many it costs (bench.slurm: calls per autoscaler tick).

Output formats, as Slurm 22.05 (Debian 12) prints them, checked against the real daemons:
- `squeue --json` and `sinfo --json` exist there but ignore every filter (`-u`, `-p`,
  `--name`): at a site with 100,000 jobs each call would return them all. So the lists use
  `-h -o FORMAT` with the filters, '|' between fields and the free-text comment last.
- `sbatch --parsable` prints `JOBID[;CLUSTER]`.
- A node list is a Slurm hostlist (`gpu[01-03,07],login1`): `expand_hostlist`.
- Time left (`%L`) is `[D-]HH:MM:SS`, `MM:SS`, or UNLIMITED / NOT_SET / INVALID.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from iris.base.errors import CapacityError, ProviderError

# squeue fields, in order; the comment is last because it is free text (may hold '|').
SQUEUE_FORMAT = "%i|%j|%T|%r|%P|%N|%L|%k"
SINFO_FORMAT = "%N|%o|%T|%E"
# sbatch refusals that mean "no room here now" (the partition is closed, a quota is full):
# another partition, or later, may serve. Everything else is a refusal of the request.
_CAPACITY = re.compile(r"partition not available|inactive or drain|QOSMax|QOSGrp|AssocMax|"
                       r"AssocGrp|MaxSubmit|job violates accounting/QOS policy", re.I)
# Slurm's words for "slurmctld did not answer" (restarting, overloaded): try again later.
_UNREACHABLE = re.compile(r"Unable to contact slurm controller|Socket timed out|"
                          r"Connection refused|Zero Bytes were transmitted", re.I)


@dataclass(frozen=True)
class SlurmJob:
    """One line of squeue: a job of this site's user in the region's partitions."""

    job_id: str
    name: str
    state: str  # PENDING, RUNNING, COMPLETING, PREEMPTED, CANCELLED, ...
    reason: str  # Resources, Priority, PartitionNodeLimit, ... ("None" when running)
    partition: str
    nodes: tuple[str, ...]  # allocated nodes, expanded; empty while pending
    time_left_s: float | None  # None: no limit
    comment: str


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str
    state: str  # idle, mixed, allocated, drained, draining, down*, ...
    reason: str

    @property
    def draining(self) -> bool:
        """Takes no new jobs: drained or draining (by an admin, or a health check)."""
        return self.state.rstrip("*~#!%$@^-").startswith("drain")


class SlurmCommands:
    """Runs sbatch / squeue / sinfo / scancel / scontrol for one site; see the docstring."""

    def __init__(self, conf: str | None = None, bin_dir: str | None = None,
                 timeout_s: float = 30.0):
        self._env = dict(os.environ)
        if conf:
            self._env["SLURM_CONF"] = conf
        # Slurm's clients read these from the environment: one the controller was started
        # with must not change what it asks for (a stray SQUEUE_FORMAT breaks the parse).
        for var in ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SINFO_FORMAT", "SLURM_TIME_FORMAT",
                    "SQUEUE_SORT", "SBATCH_EXPORT"):
            self._env.pop(var, None)
        self._bin = Path(bin_dir) if bin_dir else None
        self._timeout_s = timeout_s
        self.calls: Counter[str] = Counter()

    def run(self, command: str, args: list[str], stdin: str | None = None) -> str:
        """stdout of `command args`; ProviderError (CapacityError for capacity refusals)
        naming the command and Slurm's own message otherwise."""
        self.calls[command] += 1
        exe = str(self._bin / command) if self._bin else command
        try:
            done = subprocess.run([exe, *args], input=stdin, capture_output=True, text=True,
                                  env=self._env, timeout=self._timeout_s, check=False)
        except FileNotFoundError as exc:
            raise ProviderError(f"{command}: not found (install Slurm's client commands, or "
                                "set the region's slurm.bin_dir)") from exc
        except subprocess.TimeoutExpired as exc:
            raise ProviderError(f"{command}: no answer within {self._timeout_s:.0f} s "
                                "(is slurmctld up?)") from exc
        if done.returncode != 0:
            said = " ".join(line.strip() for line in done.stderr.splitlines() if line.strip())
            said = said or f"exit code {done.returncode}"
            error = CapacityError if _CAPACITY.search(said) else ProviderError
            raise error(f"{command}: {said}")
        return done.stdout

    def sbatch(self, args: list[str], script: str) -> str:
        """Submit `script` (given on stdin, never on the command line); the job id."""
        out = self.run("sbatch", ["--parsable", *args], stdin=script).strip()
        job_id = out.split(";", 1)[0].strip()
        if not job_id.isdigit():
            raise ProviderError(f"sbatch: expected a job id, got {out!r}")
        return job_id

    def squeue(self, user: str, partitions: list[str], *filters: str) -> list[SlurmJob]:
        """Every job of `user` in `partitions` (and `filters`, e.g. "-n", NAME), ended ones
        too (Slurm keeps those for MinJobAge, 300 s by default)."""
        out = self.run("squeue", ["-h", "-t", "all", "-u", user, "-p", ",".join(partitions),
                                  *filters, "-o", SQUEUE_FORMAT])
        return parse_squeue(out)

    def sinfo(self, partitions: list[str]) -> list[SlurmNode]:
        out = self.run("sinfo", ["-h", "-N", "-p", ",".join(partitions), "-o", SINFO_FORMAT])
        return parse_sinfo(out)

    def scancel(self, job_ids: list[str]) -> None:
        """Cancel; a job Slurm no longer knows (already purged) is no error."""
        try:
            self.run("scancel", list(job_ids))
        except ProviderError as exc:
            if "Invalid job id" not in str(exc):
                raise

    def config_value(self, key: str) -> str | None:
        """One `scontrol show config` value (e.g. KillWait: "30 sec"), or None."""
        for line in self.run("scontrol", ["show", "config"]).splitlines():
            name, sep, value = line.partition("=")
            if sep and name.strip() == key:
                return value.strip()
        return None

    def partition_value(self, partition: str, key: str) -> str | None:
        """One `scontrol show partition` value (e.g. GraceTime: "5"), or None."""
        out = self.run("scontrol", ["show", "partition", partition])
        for word in out.split():
            name, sep, value = word.partition("=")
            if sep and name == key:
                return value
        return None


def unreachable(error: Exception) -> bool:
    """Slurm's controller did not answer (restarting, overloaded): worth trying again."""
    return bool(_UNREACHABLE.search(str(error))) or "no answer within" in str(error)


def parse_squeue(text: str) -> list[SlurmJob]:
    jobs = []
    for line in text.splitlines():
        parts = line.split("|", 7)
        if len(parts) != 8 or not parts[0].strip():
            continue
        job_id, name, state, reason, partition, nodes, left, comment = parts
        jobs.append(SlurmJob(job_id.strip(), name.strip(), state.strip().upper(),
                             reason.strip(), partition.strip(), tuple(expand_hostlist(nodes)),
                             parse_duration(left), comment.strip()))
    return jobs


def parse_sinfo(text: str) -> list[SlurmNode]:
    nodes: dict[str, SlurmNode] = {}  # -N lists a node once per partition
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) == 4 and parts[0].strip():
            name = parts[0].strip()
            nodes[name] = SlurmNode(name, parts[1].strip(), parts[2].strip(), parts[3].strip())
    return list(nodes.values())


def expand_hostlist(text: str) -> list[str]:
    """`n[1-3,7],gpu[01-02]-ib` -> n1 n2 n3 n7 gpu01-ib gpu02-ib (Slurm's hostlist form;
    zero padding kept; several bracket groups in one name multiply)."""
    text = text.strip()
    if not text or text in ("(null)", "N/A"):
        return []
    out: list[str] = []
    for name in _split_top(text):
        pieces = re.split(r"(\[[^\]]*\])", name)
        choices = [_range(p[1:-1]) if p.startswith("[") else [p] for p in pieces if p]
        out += ["".join(combo) for combo in itertools.product(*choices)]
    return out


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p]


def _range(spec: str) -> list[str]:
    out = []
    for item in spec.split(","):
        lo, sep, hi = item.partition("-")
        if not sep:
            out.append(lo)
            continue
        width = len(lo) if lo.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
    return out


def parse_duration(text: str) -> float | None:
    """Slurm's `[D-]HH:MM:SS` / `MM:SS` / `MM` in seconds; None for no limit."""
    text = text.strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not m:
        return None  # UNLIMITED, NOT_SET, INVALID
    days, a, b, c = (int(g) if g else None for g in m.groups())
    if c is not None:
        hours, minutes, seconds = a, b, c
    elif b is not None:
        hours, minutes, seconds = (a, b, 0) if days is not None else (0, a, b)
    else:
        hours, minutes, seconds = (a, 0, 0) if days is not None else (0, a, 0)
    return float((days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds)


__all__ = ["SQUEUE_FORMAT", "SlurmCommands", "SlurmJob", "SlurmNode", "expand_hostlist",
           "parse_duration", "parse_sinfo", "parse_squeue", "unreachable"]
