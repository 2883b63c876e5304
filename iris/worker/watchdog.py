"""The attempt watchdog: a small process per work directory that outlives its worker.

Not the rules (lease.py) nor the worker (actor.py starts one, and starts another if it finds
none). It holds `watchdog.lock` in the work directory, so there is at most one; it reads the
worker's lease whenever that can matter (see "Looks" below) and:
- the lease lapsed (the worker is cut off from the controller): stops every recorded attempt
  (SIGTERM, FENCE_GRACE_S, SIGKILL); the worker, alive, reports their exits when it can;
- the worker process died and no restarted worker took over within ADOPT_GRACE_S: stops every
  attempt (CRASH_GRACE_S) and tells the controller (`worker_crashed`), which then requeues
  them at once instead of after the silence timeout. The records stay, so a worker restarted
  later on this directory reports those attempts' ends.
It exits once the worker is dead and no process it ran is alive.

Looks: while the worker lives within its lease, nothing can call for action before the
lease's end but the worker's exit or its clean stop, so the watchdog sleeps until that end
(renewed leases push it on: ~1 look per FENCE_AFTER_S) and is woken at once by either: the
worker's exit through a pidfd, a clean stop (the lease removed) by LOOK_NOW from the worker.
Otherwise (worker dead, lease lapsed, no pidfd) it looks every WATCH_INTERVAL_S. An idle
host's watchdog took ~1.5 ms of CPU a second looking 4 times a second; it now takes ~0.

Run as `python -m iris.worker.watchdog WORK_DIR`; the cluster token comes in
IRIS_CLUSTER_TOKEN (removed once read), CURVE keys in IRIS_KEYS_DIR.

A host runs one per worker for the worker's whole life, and a test run starts ~180 of them:
so it imports at start only what a look needs (the lease, /proc): ~21 ms of CPU less each
(81 -> 60 ms, bench/RESULTS.md, issue 33);
what stops attempts (adoption.py, with the process machinery under it) and what tells the
controller (the actors layer, credential.py) are imported when first needed.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from iris.worker import lease
from iris.worker.records import RECORD_NAME, AttemptRecord, is_alive

if TYPE_CHECKING:
    import subprocess

_log = logging.getLogger("iris.watchdog")
LOCK_NAME = "watchdog.lock"
# Sent by the worker that started it after a clean stop: look now (the lease is gone).
LOOK_NOW = signal.SIGUSR1
# Telling the controller about a crash: retried this long, then the silence timeout covers it.
_TELL_FOR_S = 10.0


# The watchdog this process started last, per work directory: until it has imported and
# taken the lock (seconds on a loaded host) the lock looks free, and every renewal in that
# time would start another.
_started: dict[Path, subprocess.Popen] = {}


def ensure_running(root: Path, env: dict[str, str]) -> None:
    """Start a watchdog for `root` unless one holds its lock or the one started last is
    still running (cheap: a poll and one flock try)."""
    import subprocess

    last = _started.get(root)
    if last is not None and last.poll() is None:
        return  # watching, or about to
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # one is watching
    finally:
        os.close(fd)  # released: the child takes it
    _started[root] = subprocess.Popen(
        [sys.executable, "-m", "iris.worker.watchdog", str(root)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=open(root / "watchdog.log", "ab"),  # noqa: SIM115 - child owns it
        start_new_session=True, env=env)


def wait_gone(root: Path, timeout_s: float) -> bool:
    """After a clean stop (the lease removed, every attempt stopped): wait for the watchdog
    this process started for `root` to see it and exit, so that the stop leaves no process
    behind writing into the work directory (one started by a late renewal takes its lock
    file there while starting up). False if it is still running after `timeout_s`."""
    import subprocess

    proc = _started.get(root)
    if proc is None:
        return True
    if proc.poll() is None and _lock_held(root):  # held: its LOOK_NOW handler is installed
        proc.send_signal(LOOK_NOW)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    _started.pop(root, None)
    return True


def _lock_held(root: Path) -> bool:
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _attempt_dirs(root: Path) -> list[Path]:
    attempts = root / "attempts"
    if not attempts.is_dir():
        return []
    return sorted(p for p in attempts.iterdir() if (p / RECORD_NAME).exists())


def _any_running(root: Path) -> bool:
    """Does a recorded attempt's process still run? (Records outlive a stop, see above.)"""
    for attempt_dir in _attempt_dirs(root):
        record = AttemptRecord.read(attempt_dir)
        if record is not None and is_alive(record.pid, record.start_ticks):
            return True
    return False


def _stop_all(root: Path, grace_s: float) -> int:
    from iris.worker.adoption import stop_recorded

    return sum(stop_recorded(d, grace_s) for d in _attempt_dirs(root))


def _tell_controller(root: Path, last: lease.Lease, token: bytes | None) -> None:
    from iris.actors import Node, NodeConfig, Security
    from iris.actors.keys import CONTROLLER_KEY
    from iris.base.errors import IrisError
    from iris.worker import credential

    keys = os.environ.get("IRIS_KEYS_DIR")
    # As the worker itself: its credential, kept in its work directory (credential.py).
    held = credential.read(root, last.worker_id, last.controller)
    auth = held.credential if held is not None else token
    node = Node(NodeConfig(), security=Security.load(keys) if keys else None).start()
    try:
        deadline = time.monotonic() + _TELL_FOR_S
        while time.monotonic() < deadline:
            try:
                node.call(last.controller, CONTROLLER_KEY, "worker_crashed",
                          (last.worker_id, last.worker_address), timeout_s=5.0,
                          auth=auth).result(10)
                return
            except IrisError as exc:
                _log.warning("cannot tell the controller yet: %s", exc)
                time.sleep(1.0)
    finally:
        node.stop()


class _Sleep:
    """The watchdog's wait between looks (the module docstring's "Looks"): a timeout, cut
    short by the watched worker's exit (its pidfd) or by LOOK_NOW (the wakeup fd)."""

    def __init__(self) -> None:
        self._wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(LOOK_NOW, lambda *_: None)  # a handler, so the wakeup fd is written
        self._pidfd: int | None = None
        self._watched: tuple[int, int] | None = None  # (pid, start ticks) of the pidfd's

    def watch(self, pid: int, start_ticks: int) -> bool:
        """Be woken when this process exits; False if it cannot be (no pidfd: poll)."""
        if self._watched == (pid, start_ticks):
            return self._pidfd is not None
        self._forget()
        self._watched = (pid, start_ticks)
        try:
            self._pidfd = os.pidfd_open(pid)
        except OSError:  # gone already, or a kernel without pidfds
            return False
        if not is_alive(pid, start_ticks):  # the pid was reused before the open: not it
            self._forget()
            self._watched = (pid, start_ticks)
        return self._pidfd is not None

    def _forget(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
        self._pidfd, self._watched = None, None

    def until_woken(self, timeout_s: float) -> None:
        fds = [self._wake_r] + ([self._pidfd] if self._pidfd is not None else [])
        readable, _, _ = select.select(fds, [], [], max(0.0, timeout_s))
        if self._pidfd in readable:
            self._forget()  # it exited: readable for good, so not waited on again
        if self._wake_r in readable:
            while True:
                try:
                    if not os.read(self._wake_r, 512):
                        break
                except BlockingIOError:
                    break


def _next_look_s(current: lease.Lease | None, alive: bool, woken_by_exit: bool,
                 now: float) -> float:
    """How long the watchdog may sleep (the module docstring's "Looks")."""
    if alive and woken_by_exit and current is not None and now < current.expires_at:
        return current.expires_at - now
    return lease.WATCH_INTERVAL_S


def watch(root: Path, token: bytes | None, sleep: _Sleep | None = None) -> None:
    sleep = sleep or _Sleep()
    dead_since: float | None = None
    told = False
    while True:
        current = lease.read(root)
        now = time.monotonic()
        alive = current is not None and is_alive(current.worker_pid, current.worker_start_ticks)
        if alive:
            dead_since, told = None, False
        elif dead_since is None:
            dead_since = now
        action = lease.verdict(current, now, alive, dead_since)
        if action == "lapsed" and _attempt_dirs(root):
            _log.warning("lease lapsed (no acknowledged report for %.0f s): stopping attempts",
                         lease.FENCE_AFTER_S)
            _stop_all(root, lease.FENCE_GRACE_S)
        elif action == "crashed" and not told:
            stopped = _stop_all(root, lease.CRASH_GRACE_S)
            _log.warning("worker %s died: stopped %d attempts", current.worker_id, stopped)
            _tell_controller(root, current, token)
            told = True
        if not alive and (told or current is None) and not _any_running(root):
            return
        woken_by_exit = alive and sleep.watch(current.worker_pid, current.worker_start_ticks)
        sleep.until_woken(_next_look_s(current, alive, woken_by_exit, time.monotonic()))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s watchdog: %(message)s")
    root = Path(sys.argv[1])
    sleep = _Sleep()  # LOOK_NOW's handler before the lock: the worker signals a lock holder
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another watchdog holds the lock
    raw = os.environ.pop("IRIS_CLUSTER_TOKEN", "")
    watch(root, bytes.fromhex(raw) if raw else None, sleep)


if __name__ == "__main__":
    main()
