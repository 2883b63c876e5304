"""The /metrics page: Prometheus text exposition (format 0.0.4) built from plain data. No I/O.

Inputs are what the dashboard already reads: the controller's live snapshot, task counts from
the job store, and the controller node's traffic counters. Families whose source is not wired
yet are still declared (HELP says why) so dashboards and alerts can be written now:

- gang reservations: the region actors that reserve / commit / abort do not exist yet, so no
  reservation has ever happened and the counters are truly 0.
- scheduling pass duration, actor call latency, log shipping lag and dropped lines: nobody
  measures them yet (the controller snapshot and worker reports carry no such numbers), so
  these families have no samples: 0 would claim "no lag" when the truth is "unknown".
  When the snapshot grows the keys named in `_from_snapshot`, samples appear.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from iris.controller.jobs.model import JobState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_GANG_OUTCOMES = ("reserved", "committed", "aborted", "expired")
# Workers heartbeat every 1 s; one missed beat is "late" before the 3 s loss timeout.
LATE_AFTER_S = 1.5


def render(snapshot: Mapping[str, Any], task_states: Mapping[str, int],
           node_stats: Mapping[str, int]) -> str:
    """The whole /metrics body."""
    out: list[str] = []
    jobs = snapshot.get("jobs_by_state", {})
    _family(out, "iris_jobs", "gauge", "Jobs in the controller's store by state.",
            [({"state": s.value}, jobs.get(s.value, 0)) for s in JobState])
    _family(out, "iris_tasks", "gauge", "Tasks in the controller's store by state.",
            [({"state": s}, n) for s, n in sorted(task_states.items())])
    workers = snapshot.get("workers", [])
    late = sum(1 for w in workers if w.get("last_heard_s_ago", 0) > LATE_AFTER_S)
    _family(out, "iris_workers", "gauge",
            f"Registered workers: healthy, or late (silent > {LATE_AFTER_S} s, not yet lost).",
            [({"state": "healthy"}, len(workers) - late), ({"state": "late"}, late)])
    summary = snapshot.get("summary", {})
    _family(out, "iris_tasks_pending", "gauge", "Tasks waiting for a placement.",
            [({}, snapshot.get("pending_tasks", summary.get("tasks_pending", 0)))])
    _family(out, "iris_attempts_active", "gauge", "Attempts holding a worker's resources.",
            [({}, summary.get("attempts_active", 0))])
    _family(out, "iris_snapshot_timestamp_seconds", "gauge",
            "Wall time of the controller snapshot these numbers come from (unix seconds).",
            [({}, snapshot.get("at", 0))])
    _family(out, "iris_gang_reservations_total", "counter",
            "Gang reservations by outcome. Always 0 for now: the region actors that reserve, "
            "commit and abort are not wired yet.",
            [({"outcome": o}, 0) for o in _GANG_OUTCOMES])
    for name, value in sorted(node_stats.items()):
        _family(out, f"iris_node_{name}_total", "counter",
                f"Controller node traffic counter {name} (iris.actors.stats.NodeStats).",
                [({}, value)])
    _from_snapshot(out, snapshot)
    return "\n".join(out) + "\n"


def _from_snapshot(out: list[str], snapshot: Mapping[str, Any]) -> None:
    """Families whose numbers the controller does not publish yet (see module docstring)."""
    passes = snapshot.get("scheduling_passes")  # {"buckets": {le: n}, "count": n, "sum_s": x}
    _histogram(out, "iris_scheduling_pass_duration_seconds",
               "Duration of one scheduling pass. No samples until the controller measures it.",
               passes)
    _histogram(out, "iris_actor_call_duration_seconds",
               "Actor call latency at the controller node. No samples until the node hot path "
               "records it.", snapshot.get("call_latency"))
    shipping = snapshot.get("log_shipping") or {}
    _family(out, "iris_log_shipping_lag_seconds", "gauge",
            "Age of the oldest unshipped log byte, worst worker. No samples until workers "
            "report their shipper stats.",
            [({}, shipping["max_flush_lag_s"])] if "max_flush_lag_s" in shipping else [])
    _family(out, "iris_log_dropped_lines_total", "counter",
            "Log lines dropped because shipping fell behind, all workers. No samples until "
            "workers report their shipper stats.",
            [({}, shipping["dropped_lines"])] if "dropped_lines" in shipping else [])


def _histogram(out: list[str], name: str, help_text: str, data: Mapping | None) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} histogram")
    if not data:
        return
    for le, n in sorted(data["buckets"].items(), key=lambda kv: float(kv[0])):
        out.append(f'{name}_bucket{{le="{_number(float(le))}"}} {_number(n)}')
    out.append(f'{name}_bucket{{le="+Inf"}} {_number(data["count"])}')
    out.append(f"{name}_sum {_number(data['sum_s'])}")
    out.append(f"{name}_count {_number(data['count'])}")


def _family(out: list[str], name: str, kind: str, help_text: str,
            samples: Iterable[tuple[Mapping[str, str], float]]) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")
    sample_name = name
    for labels, value in samples:
        label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        out.append(f"{sample_name}{{{label_text}}} {_number(value)}" if label_text
                   else f"{sample_name} {_number(value)}")


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))
