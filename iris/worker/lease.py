"""Attempt fencing: the lease under which a worker's attempts may run. Pure rules plus the file.

Not the processes (watchdog.py kills; actor.py renews). The invariant (docs/protocol.md,
Fencing): by the time the controller runs a task elsewhere, its old attempt is gone.

- The worker renews its lease each time the controller acknowledges a report: the lease then
  lasts FENCE_AFTER_S from when that report was sent. A worker cut off from the controller
  (partition, frozen controller) stops renewing, and once the lease lapses its attempts are
  stopped: SIGTERM, FENCE_GRACE_S, SIGKILL.
- A worker process that dies (kill -9, OOM, crash) stops renewing too, but waiting out the
  lease would keep its tasks down for FENCE_AFTER_S. Its watchdog sees the death at once, waits
  ADOPT_GRACE_S for a restarted worker to take the attempts over (it kills and reports them
  itself), then stops them and tells the controller they are gone: only then is the task
  requeued, within about ADOPT_GRACE_S + CRASH_GRACE_S of the crash.
- The controller declares a *silent* worker lost after `worker_dead_after_s` (SILENT_LOST_S
  by default) and only then requeues its attempts. The inequality that keeps two attempts of
  a task from overlapping:

      FENCE_AFTER_S + FENCE_GRACE_S + WATCH_INTERVAL_S + MARGIN_S <= SILENT_LOST_S
          15        +      5        +      0.25        +   5     <=     30

  The controller's silence clock starts when it *received* the last report; the worker's
  lease from when it *sent* it, which is earlier, so the lease always lapses first. MARGIN_S
  covers a watchdog that is slow to be scheduled on a loaded host.

Times are CLOCK_MONOTONIC seconds, which every process on one host shares.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from iris.wire.fencing import (  # noqa: F401 - the constants live in the wire layer
    ADOPT_GRACE_S,
    CRASH_GRACE_S,
    FENCE_AFTER_S,
    FENCE_GRACE_S,
    MARGIN_S,
    SILENT_LOST_S,
    WATCH_INTERVAL_S,
)

LEASE_NAME = "lease.json"


@dataclass(frozen=True)
class Lease:
    worker_pid: int
    worker_start_ticks: int  # with the pid: that very process, not a reused pid
    worker_id: str
    worker_address: str  # with the id: which registration of the worker this was
    controller: str  # where to say that attempts were fenced
    expires_at: float  # CLOCK_MONOTONIC


def write(root: Path, lease: Lease) -> None:
    tmp = root / (LEASE_NAME + ".tmp")
    tmp.write_text(json.dumps(asdict(lease)))
    os.replace(tmp, root / LEASE_NAME)  # atomic: the watchdog reads all or nothing


def read(root: Path) -> Lease | None:
    try:
        return Lease(**json.loads((root / LEASE_NAME).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def lapsed(root: Path, now: float) -> bool:
    """True if this work directory's lease has lapsed (its attempts are being fenced)."""
    current = read(root)
    return current is not None and now >= current.expires_at


def verdict(lease: Lease | None, now: float, worker_alive: bool,
            dead_since: float | None) -> str | None:
    """What the watchdog must do now: "lapsed" (stop attempts: cut off), "crashed" (stop
    attempts and tell the controller: the worker died), or None (nothing yet)."""
    if lease is None:
        return None
    if not worker_alive:
        return "crashed" if dead_since is not None and now - dead_since >= ADOPT_GRACE_S \
            else None
    return "lapsed" if now >= lease.expires_at else None
