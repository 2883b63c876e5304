"""The attempt watchdog is started once per work directory, however often the worker renews
its lease while the watchdog is still starting (iris/worker/watchdog.py `ensure_running`)."""

from __future__ import annotations

import os
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
        watchdog._started.pop(tmp_path).wait(60)


def _holds_a_flock(pid: int) -> bool:
    """Does `pid` hold a flock (its work directory's lock: it takes no other)? Read from
    /proc/locks, not by trying the lock, which would make the watchdog's own try fail."""
    with open("/proc/locks") as f:
        return any(line.split()[1] == "FLOCK" and line.split()[4] == str(pid) for line in f)
