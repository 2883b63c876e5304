"""The attempt watchdog is started once per work directory, however often the worker renews
its lease while the watchdog is still starting (iris/worker/watchdog.py `ensure_running`);
and while its worker lives within its lease it looks only when woken: by the worker's exit,
by a clean stop, or at the lease's end (the module docstring's "Looks")."""

from __future__ import annotations

import os
import subprocess
import time

from iris.worker import lease, watchdog
from iris.worker.records import proc_start_ticks
from tests.conftest import watchdogs_of


def test_renewals_while_the_watchdog_starts_start_no_second_one(tmp_path, wait_until):
    """Each renewal asks for a watchdog; until the first has imported and taken its lock
    (seconds on a loaded host) the lock looks free. Only one is started."""
    me = os.getpid()
    lease.write(tmp_path, lease.Lease(me, proc_start_ticks(me) or 0, "w-test",
                                      "tcp://127.0.0.1:1", "tcp://127.0.0.1:1",
                                      time.monotonic() + 600))
    env = dict(os.environ)
    try:
        for _ in range(5):  # renewals in quick succession, as reports are acknowledged
            watchdog.ensure_running(tmp_path, env)
        assert len(watchdogs_of(tmp_path)) <= 1  # (one per call before: 5)
        started = watchdog._started[tmp_path]
        wait_until(lambda: _holds_a_flock(started.pid), what="the watchdog holding its lock")
        watchdog.ensure_running(tmp_path, env)
        assert watchdogs_of(tmp_path) == [started.pid]
    finally:
        (tmp_path / lease.LEASE_NAME).unlink()  # no lease: the watchdog exits
        assert watchdog.wait_gone(tmp_path, 60)


def _lease_of(root, pid: int, lasts_s: float) -> None:
    lease.write(root, lease.Lease(pid, proc_start_ticks(pid) or 0, "w-test",
                                  "tcp://127.0.0.1:1", "tcp://127.0.0.1:1",
                                  time.monotonic() + lasts_s))


def test_watchdog_sees_its_worker_exit_at_once_not_at_the_lease_end(tmp_path, wait_until):
    """The lease has 10 minutes left, so only the exit's own wake-up (a pidfd) can end the
    watchdog within the wait: the worker (a stand-in process) is killed, nothing ran, and
    with no lease left the watchdog exits."""
    worker = subprocess.Popen(["sleep", "600"])
    try:
        _lease_of(tmp_path, worker.pid, 600)
        watchdog.ensure_running(tmp_path, dict(os.environ))
        started = watchdog._started.pop(tmp_path)
        wait_until(lambda: _watches_a_pidfd(started.pid), what="the watchdog's first look")
        (tmp_path / lease.LEASE_NAME).unlink()  # as a clean stop leaves it, but unsignalled
        worker.kill()
        worker.wait()
        assert started.wait(120) == 0
    finally:
        worker.kill()
        worker.wait()


def test_a_clean_stop_wakes_the_watchdog_while_its_worker_still_runs(tmp_path, wait_until):
    """A worker's clean stop removes its lease and waits for its watchdog (wait_gone) before
    the worker exits: LOOK_NOW wakes it, though the lease it read had 10 minutes left."""
    _lease_of(tmp_path, os.getpid(), 600)
    watchdog.ensure_running(tmp_path, dict(os.environ))
    started = watchdog._started[tmp_path]
    try:
        wait_until(lambda: _watches_a_pidfd(started.pid), what="the watchdog's first look")
    finally:
        (tmp_path / lease.LEASE_NAME).unlink()
        assert watchdog.wait_gone(tmp_path, 120)
    assert started.returncode == 0


def _watches_a_pidfd(pid: int) -> bool:
    """Has the watchdog looked once and opened its worker's pidfd?"""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == "anon_inode:[pidfd]":
                return True
        except OSError:
            continue
    return False


def _holds_a_flock(pid: int) -> bool:
    """Does `pid` hold a flock (its work directory's lock: it takes no other)? Read from
    /proc/locks, not by trying the lock, which would make the watchdog's own try fail."""
    with open("/proc/locks") as f:
        return any(line.split()[1] == "FLOCK" and line.split()[4] == str(pid) for line in f)
