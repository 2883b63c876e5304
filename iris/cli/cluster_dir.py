"""A cluster's directory on this machine, and the processes that carry its mark.

Not the controller (daemon.py starts and stops it). Everything a cluster started with
`iris cluster --config F start` keeps on this machine is under ONE directory:

    <cluster dir>            the config's controller.state_dir, else
                             $IRIS_HOME/clusters/<name> ($IRIS_HOME: ~/.iris)
      controller.lock        held by the live controller: {"pid", "address", "started_at"}
      controller.log         the controller's output, appended by each start
      jobs.sqlite3 ...       its state (the directory is its --state-dir): jobs, tokens
      hosts/<region>/...     the work directories of its local slices' workers

Every process the cluster starts carries IRIS_CLUSTER_MARK=<cluster dir> in its environment
(the controller, the workers of its local slices, their watchdogs and tasks), which is how
`stop` proves nothing of it is left (`marked`), and stops what is (`sweep`).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from iris.base.clock import SYSTEM_CLOCK
from iris.wire.states import CLUSTER_MARK_ENV

HOME_ENV = "IRIS_HOME"
LOG_NAME = "controller.log"


def cluster_dir(config) -> Path:
    """The directory of the cluster `config` (a ClusterConfig) names, absolute."""
    if config.controller.state_dir:
        return Path(config.controller.state_dir).expanduser().resolve()
    home = Path(os.environ.get(HOME_ENV) or Path.home() / ".iris").expanduser()
    return (home / "clusters" / config.name).resolve()


def marked(mark: str) -> dict[int, str]:
    """Live processes whose environment carries IRIS_CLUSTER_MARK=`mark`: pid -> command."""
    needle = f"{CLUSTER_MARK_ENV}={mark}".encode()
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue  # a zombie: already gone, waiting for its parent
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        found[int(entry.name)] = " ".join(w.decode(errors="replace") for w in words if w)
    return found


def sweep(mark: str, grace_s: float) -> tuple[dict[int, str], dict[int, str]]:
    """Stop what is left with `mark`: SIGTERM, `grace_s`, then SIGKILL. (stopped, left)."""
    first = marked(mark)
    for pid in first:
        _signal(pid, signal.SIGTERM)
    left = _wait_gone(first, grace_s)
    for pid in left:
        _signal(pid, signal.SIGKILL)
    left = _wait_gone(left, 5.0)
    return {p: c for p, c in first.items() if p not in left}, left


def _wait_gone(pids: dict[int, str], timeout_s: float) -> dict[int, str]:
    gate, deadline = threading.Event(), SYSTEM_CLOCK.monotonic() + timeout_s
    left = dict(pids)
    while left and SYSTEM_CLOCK.monotonic() < deadline:
        gate.wait(0.1)  # other processes' exits: no event to wait on but polls
        alive = marked_or_alive(left)
        left = {p: c for p, c in left.items() if p in alive}
    return left


def marked_or_alive(pids: dict[int, str]) -> set[int]:
    """Which of `pids` still run (not zombies)."""
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X"):
                    alive.add(pid)
        except OSError:
            continue
    return alive


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass  # gone already, or not ours


def log_since(path: Path, offset: int) -> str:
    """What the log got after `offset` bytes (this start's part of it)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


__all__ = ["HOME_ENV", "LOG_NAME", "cluster_dir", "log_since", "marked", "marked_or_alive",
           "sweep"]
