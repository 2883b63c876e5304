"""Checking a worker's report whole, before any turn: what the controller's loop thread and
each report front (report_front.py) run on every report. Only the wire's schema: a report
front imports this and not the controller's job model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from iris.wire import control


def check_report(worker_id: Any, updates: Any, stats: Any = None,
                 running: Any = None, usage: Any = ()) -> control.WorkerReport:
    """A worker's report, checked whole (InvalidRequestError names the bad field). Runs on
    the node's loop thread for batched reports (actor.py), off the controller's turn.

    Most reports at a big fleet are an idle host's heartbeat: no updates, no usage, its
    figures and its (empty) list of attempts. Those are checked here against the same
    bounds (read from WorkerReport's fields) in ~1/4 of the generic decode's time; any
    other report, and any value this check doubts, goes through `control.decode`, which
    gives the same message or names the fault."""
    if (type(updates) in _SEQ and type(usage) in _SEQ and not updates and not usage
            and type(worker_id) is str and 0 < len(worker_id) <= _ID_LEN
            and (stats is None or _figures_ok(stats))
            and (running is None or _attempt_ids_ok(running))):
        return control.WorkerReport(worker_id, (), stats,
                                    None if running is None else tuple(running), ())
    return control.decode(control.WorkerReport, {
        "worker_id": worker_id, "updates": updates, "stats": stats, "running": running,
        "usage": usage})


_SEQ = (list, tuple)
_LIMITS = {f.name: f.metadata for f in dataclasses.fields(control.WorkerReport)}
_ID_LEN = _LIMITS["worker_id"]["max_len"]
_STATS_ITEMS = _LIMITS["stats"]["max_items"]
_RUNNING_ITEMS, _RUNNING_LEN = _LIMITS["running"]["max_items"], _LIMITS["running"]["max_len"]
_KEY_LEN = 1024  # schema.py's bound on the keys of a dict[str, Any]
assert _LIMITS["worker_id"]["non_empty"] and _LIMITS["running"]["non_empty"]


def _figures_ok(stats: Any) -> bool:
    """A report's `stats` as schema.py takes a dict[str, Any]: string keys, bounded."""
    return type(stats) is dict and len(stats) <= _STATS_ITEMS and all(
        type(k) is str and len(k) <= _KEY_LEN for k in stats)


def _attempt_ids_ok(running: Any) -> bool:
    return type(running) in _SEQ and len(running) <= _RUNNING_ITEMS and all(
        type(a) is str and 0 < len(a) <= _RUNNING_LEN for a in running)
