"""The controller as a daemon on this machine: `iris cluster --config F start|stop|restart|
status` when the config names no controller VM (or with --local). Not the slices (operate.py).

`start` runs `iris controller serve --config F --state-dir DIR` detached (its own session,
stdin closed, output appended to DIR/controller.log, the cluster's mark in its environment:
cluster_dir.py) and returns once it answers, saying on stderr what it waits for. The
controller itself refuses a second one on the same directory or address (state_lock.py,
one line with the holder's pid), and so does `start` before it spawns anything. `stop`
sends SIGTERM (the controller stops its local slices first, so their workers say goodbye
while it still serves) and waits for the process to end, SIGKILL after `timeout_s`.

A controller host is anything with these four verbs: this machine (LocalController), the
GCP controller VM (operate.py's GcpVmHost). An on-prem controller host (a Slurm login node)
is this same class run there: `ssh login1 iris cluster --config F start --local`, whose
one-line answers and exit codes the caller relays.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from iris.actors import ports
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import ConfigError, ConflictError, IrisError
from iris.cli import cluster_dir
from iris.controller import state_lock
from iris.wire.states import CLUSTER_MARK_ENV

# Between progress lines while `start` waits for the controller to answer.
_PROGRESS_EVERY_S = 2.0
# One probe's deadline: a controller up answers list_workers in milliseconds.
_PROBE_S = 1.0
# After it answers, how long to look for the dashboard's line in its log (it starts the
# dashboard right after the controller: milliseconds).
_DASHBOARD_S = 5.0


class LocalController:
    """The controller of `config` on this machine, in `directory` (cluster_dir.py)."""

    def __init__(self, config: Any, config_path: Path, directory: Path):
        self.config, self.config_path, self.dir = config, Path(config_path).resolve(), directory
        self.address = config.controller.address
        self.bind = config.controller.bind or config.controller.address
        self.log = directory / cluster_dir.LOG_NAME

    def holder(self) -> state_lock.Holder | None:
        return state_lock.holder(self.dir)

    def facts(self) -> dict:
        return {"cluster_dir": str(self.dir), "log": str(self.log), "address": self.address}

    def start(self, timeout_s: float, out: TextIO) -> dict:
        """Spawn and wait until it answers: {"pid", "address", "dashboard", "log", ...}.
        ConflictError (nothing started) if a live controller holds the directory or
        another process the address."""
        held = self.holder()
        if held is not None:
            raise ConflictError(f"cluster {self.config.name} is already running: controller "
                                f"{held.describe()} (cluster dir {self.dir}); stop it first: "
                                f"iris cluster --config {self.config_path} stop")
        taken = ports.bind_error(self.bind)
        if taken:
            raise ConflictError(f"cluster {self.config.name}: {taken}")
        started = SYSTEM_CLOCK.monotonic()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            offset = self.log.stat().st_size if self.log.exists() else 0
            proc = self._spawn()
        except OSError as exc:  # an operator's path: one line, not a traceback
            raise ConfigError(f"cluster dir {self.dir}: {exc.strerror} ({exc.filename})") \
                from exc
        print(f"starting the controller of cluster {self.config.name}: pid {proc.pid}, log "
              f"{self.log}", file=out, flush=True)
        self._wait_answering(proc, offset, timeout_s, out)
        answered_in = SYSTEM_CLOCK.monotonic() - started
        return {**self.facts(), "pid": proc.pid, "dashboard": self._dashboard(offset),
                "started_in_s": round(answered_in, 3)}

    def _dashboard(self, offset: int) -> str:
        """The dashboard URL the controller printed (it starts it just after it answers)."""
        gate = threading.Event()
        for _ in range(int(_DASHBOARD_S / 0.05)):
            url = _dashboard(cluster_dir.log_since(self.log, offset))
            if url:
                return url
            gate.wait(0.05)  # another process's file: no event to wait on
        return ""

    def _spawn(self) -> subprocess.Popen:
        argv = [sys.executable, "-m", "iris", "controller", "serve", "--config",
                str(self.config_path), "--state-dir", str(self.dir), "--bind", self.bind]
        with open(self.log, "ab") as log:  # the daemon keeps its own descriptor
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, CLUSTER_MARK_ENV: str(self.dir)})

    def _wait_answering(self, proc: subprocess.Popen, offset: int, timeout_s: float,
                        out: TextIO) -> None:
        import iris

        started = SYSTEM_CLOCK.monotonic()
        said = started
        with iris.connect(self.address) as ctx:
            while True:
                if proc.poll() is not None:
                    raise IrisError(f"the controller exited during start-up (code "
                                    f"{proc.returncode}): {_last_words(self.log, offset)} "
                                    f"(log: {self.log})")
                try:
                    ctx.node.call(self.address, CONTROLLER_KEY, "list_workers",
                                  timeout_s=_PROBE_S).result()
                    return
                except IrisError:
                    pass
                now = SYSTEM_CLOCK.monotonic()
                if now - started > timeout_s:
                    proc.terminate()
                    raise IrisError(f"the controller did not answer at {self.address} within "
                                    f"{timeout_s:g} s; stopped it (log: {self.log})")
                if now - said >= _PROGRESS_EVERY_S:
                    said = now
                    print(f"  waiting for it to answer at {self.address} "
                          f"({now - started:.0f} s)", file=out, flush=True)

    def stop(self, timeout_s: float) -> dict:
        """SIGTERM the live controller and wait for it to end (SIGKILL to its process group
        after `timeout_s`): {"pid", "address", "stopped", "how"}; {"stopped": False,
        "how": "not running"} when none runs."""
        held = self.holder()
        if held is None or not held.pid:
            return {"pid": None, "address": self.address, "stopped": False,
                    "how": "not running"}
        how = "SIGTERM"
        try:
            os.kill(held.pid, signal.SIGTERM)
        except ProcessLookupError:
            return {"pid": held.pid, "address": held.address, "stopped": True, "how": "gone"}
        if not _wait_exit(held.pid, timeout_s):
            how = "SIGKILL"
            try:
                os.killpg(held.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return {"pid": held.pid, "address": held.address or self.address,
                "stopped": _wait_exit(held.pid, 10.0), "how": how}


def _wait_exit(pid: int, timeout_s: float) -> bool:
    """True once process `pid` (not necessarily our child) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
    finally:
        os.close(fd)
    if readable:
        gate = threading.Event()
        for _ in range(50):  # exited; a zombie until its parent reaps it: that is gone
            if not cluster_dir.marked_or_alive({pid: ""}):
                return True
            gate.wait(0.02)
        return True
    return False


def _last_words(log: Path, offset: int) -> str:
    """The line that says why the controller exited (its `iris: ...`, else its last)."""
    lines = [line.strip() for line in cluster_dir.log_since(log, offset).splitlines()
             if line.strip()]
    said = [line for line in lines if line.startswith("iris: ")]
    return (said or lines or ["(it printed nothing)"])[-1]


def _dashboard(text: str) -> str:
    """The dashboard URL the controller printed ("  dashboard: URL  (kills need...)")."""
    for line in text.splitlines():
        if line.strip().startswith("dashboard: "):
            return line.strip().split()[1]
    return ""


__all__ = ["LocalController"]
