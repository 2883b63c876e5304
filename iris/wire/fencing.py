"""The fencing constants that controller and workers must agree on (see worker/lease.py for the
rules and docs/protocol.md, Fencing). Times in seconds.

    FENCE_AFTER_S + FENCE_GRACE_S + WATCH_INTERVAL_S + MARGIN_S <= SILENT_LOST_S
    BLIP_S + REPORT_INTERVAL_MAX_S <= FENCE_AFTER_S
"""

from __future__ import annotations

# A worker's lease lasts this long from its last acknowledged report (it reports every 1 s):
# longer than a 10 s blip plus a report interval, so such a blip costs nothing.
FENCE_AFTER_S = 15.0
# SIGTERM -> SIGKILL when a lapsed lease stops attempts: time for on_preempt callbacks.
FENCE_GRACE_S = 5.0
# After a worker process died: how long a restarted worker has to take its attempts over.
ADOPT_GRACE_S = 1.0
# SIGTERM -> SIGKILL for the attempts of a crashed worker.
CRASH_GRACE_S = 2.0
# How often the watchdog looks.
WATCH_INTERVAL_S = 0.25
# Slack for a watchdog slow to be scheduled on a loaded host.
MARGIN_S = 5.0
# The controller's default patience with a silent worker: a blip or a pause this short costs
# nothing (the issue: a 10 s blip once threw away a 64-host gang's progress).
SILENT_LOST_S = 30.0

# A network blip this short costs a worker nothing: its lease outlives it.
BLIP_S = 10.0
# The longest report interval a controller may ask of its workers (a large fleet, or a
# controller falling behind, is asked for fewer reports): the lease, renewed by each
# answered report, must still outlast a blip plus one interval (10 + 3 <= 15), and the
# silence rule (SILENT_LOST_S) then allows ten missed intervals.
REPORT_INTERVAL_MAX_S = 3.0

# A worker is *late* (dashboard, /metrics, `iris worker list`) once it missed the interval
# the controller last asked of it by a margin: silent longer than LATE_FACTOR x that interval
# + LATE_MARGIN_S. A busy but healthy host, whose report comes a little after its interval,
# is not; one that missed two reports in a row is (long before it is lost: SILENT_LOST_S).
LATE_FACTOR, LATE_MARGIN_S = 2.0, 1.0
LATE_RULE = (f"late: silent longer than {LATE_FACTOR:g} x the report interval the controller "
             f"asked it to use + {LATE_MARGIN_S:g} s (not yet lost: that is {SILENT_LOST_S:g} s)")


def late_after_s(interval_s: float) -> float:
    """Silence past which a worker asked to report every `interval_s` is late."""
    return LATE_FACTOR * interval_s + LATE_MARGIN_S


def worker_is_late(row: dict) -> bool:
    """A worker row (Controller.list_workers / snapshot): its `late` flag, or for a controller
    from before the flag, the rule at the longest interval (never a false alarm)."""
    if "late" in row:
        return bool(row["late"])
    return row.get("last_heard_s_ago", 0) > late_after_s(REPORT_INTERVAL_MAX_S)


if BLIP_S + REPORT_INTERVAL_MAX_S > FENCE_AFTER_S:
    raise AssertionError("fencing constants: a lease must outlast a blip plus a report interval")
if FENCE_AFTER_S + FENCE_GRACE_S + WATCH_INTERVAL_S + MARGIN_S > SILENT_LOST_S:
    raise AssertionError("fencing constants: a lease must lapse before the controller gives up")
