"""The attempt watchdog: a small process per work directory that outlives its worker.

Not the rules (lease.py) nor the worker (actor.py starts one, and starts another if it finds
none). It holds `watchdog.lock` in the work directory, so there is at most one, and every
WATCH_INTERVAL_S it reads the worker's lease and:
- the lease lapsed (the worker is cut off from the controller): stops every recorded attempt
  (SIGTERM, FENCE_GRACE_S, SIGKILL); the worker, alive, reports their exits when it can;
- the worker process died and no restarted worker took over within ADOPT_GRACE_S: stops every
  attempt (CRASH_GRACE_S) and tells the controller (`worker_crashed`), which then requeues
  them at once instead of after the silence timeout. The records stay, so a worker restarted
  later on this directory reports those attempts' ends.
It exits once the worker is dead and no process it ran is alive.

Run as `python -m iris.worker.watchdog WORK_DIR`; the cluster token comes in
IRIS_CLUSTER_TOKEN (removed once read), CURVE keys in IRIS_KEYS_DIR.

A host runs one per worker for the worker's whole life, and a test run starts ~180 of them:
so it imports at start only what a look needs (the lease, /proc), ~45 ms of CPU less each;
what stops attempts (adoption.py, with the process machinery under it) and what tells the
controller (the actors layer, credential.py) are imported when first needed.
"""

from __future__ import annotations

import fcntl
import logging
import os
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
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    _started.pop(root, None)
    return True


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


def watch(root: Path, token: bytes | None) -> None:
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
        time.sleep(lease.WATCH_INTERVAL_S)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s watchdog: %(message)s")
    root = Path(sys.argv[1])
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another watchdog holds the lock
    raw = os.environ.pop("IRIS_CLUSTER_TOKEN", "")
    watch(root, bytes.fromhex(raw) if raw else None)


if __name__ == "__main__":
    main()
