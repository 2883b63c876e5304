"""The /metrics page: Prometheus text exposition (format 0.0.4) built from plain data. No I/O.

Inputs are what the dashboard already reads: the controller's live snapshot, task counts from
the job store, and the controller node's own counters and call latency (the dashboard runs
in the controller's process and calls through the controller's node).

From the snapshot: jobs and workers by state, pending tasks, `scheduling_passes` (histogram),
`gang_reservations` (outcome -> count, summed over the region actors), `log_shipping` (worst
lag and dropped lines over the live workers' last reports) and `capacity` (the autoscaler's
scale groups). A family whose key is absent (an older controller, no autoscaler, no worker
reported yet) is still declared, with no samples: 0 would claim "no lag" or "no slices"
when the truth is "unknown".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from iris.dashboard.capacity import slice_counts
from iris.wire.fencing import LATE_RULE, worker_is_late
from iris.wire.states import JobState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_GANG_OUTCOMES = ("reserved", "committed", "aborted", "expired")


def render(snapshot: Mapping[str, Any], task_states: Mapping[str, int],
           node_stats: Mapping[str, int], *, call_outcomes: Mapping[str, int] | None = None,
           call_latency: Mapping | None = None,
           served_latency: Mapping[str, Mapping] | None = None) -> str:
    """The whole /metrics body. `node_stats`: traffic counters (NodeStats.as_dict());
    `call_outcomes` and `call_latency`: NodeStats.call_outcomes() / latency_snapshot();
    `served_latency`: Node.served_latency(), per actor hosted by the controller's node."""
    out: list[str] = []
    jobs = snapshot.get("jobs_by_state", {})
    _family(out, "iris_jobs", "gauge", "Jobs in the controller's store by state.",
            [({"state": s.value}, jobs.get(s.value, 0)) for s in JobState])
    _family(out, "iris_tasks", "gauge", "Tasks in the controller's store by state.",
            [({"state": s}, n) for s, n in sorted(task_states.items())])
    workers = snapshot.get("workers", [])
    late = sum(1 for w in workers if worker_is_late(w))
    _family(out, "iris_workers", "gauge",
            f"Registered workers: healthy, or {LATE_RULE}.",
            [({"state": "healthy"}, len(workers) - late), ({"state": "late"}, late)])
    summary = snapshot.get("summary", {})
    _family(out, "iris_tasks_pending", "gauge", "Tasks waiting for a placement.",
            [({}, snapshot.get("pending_tasks", summary.get("tasks_pending", 0)))])
    _family(out, "iris_attempts_active", "gauge", "Attempts holding a worker's resources.",
            [({}, summary.get("attempts_active", 0))])
    _family(out, "iris_snapshot_timestamp_seconds", "gauge",
            "Wall time of the controller snapshot these numbers come from (unix seconds).",
            [({}, snapshot.get("at", 0))])
    _histogram(out, "iris_scheduling_pass_duration_seconds",
               "Duration of one scheduling pass of the controller.",
               snapshot.get("scheduling_passes"))
    _gangs(out, snapshot.get("gang_reservations"))
    _calls(out, node_stats, call_outcomes, call_latency, served_latency)
    _shipping(out, snapshot.get("log_shipping") or {})
    _capacity(out, snapshot.get("capacity"))
    _figures(out, snapshot.get("figures"))
    return "\n".join(out) + "\n"


def _gangs(out: list[str], counts: Mapping[str, int] | None) -> None:
    outcomes = () if counts is None else (
        [*_GANG_OUTCOMES, *sorted(k for k in counts if k not in _GANG_OUTCOMES)])
    _family(out, "iris_gang_reservations_total", "counter",
            "Gang reservations by outcome over every region actor since the controller "
            "started: reserved (a region held a whole gang), committed, aborted (the "
            "coordinator let it go), expired (its lease lapsed uncommitted), released (a "
            "committed gang ended).",
            [({"outcome": o}, counts.get(o, 0)) for o in outcomes] if counts else [])


def _calls(out: list[str], node_stats: Mapping[str, int],
           outcomes: Mapping[str, int] | None, latency: Mapping | None,
           served: Mapping[str, Mapping] | None) -> None:
    for name, value in sorted(node_stats.items()):
        _family(out, f"iris_node_{name}_total", "counter",
                f"Controller node traffic counter {name} (iris.actors.stats.NodeStats).",
                [({}, value)])
    _family(out, "iris_actor_calls_total", "counter",
            "Actor calls the controller's node made, by outcome: ok, error (the callee "
            "answered with an error), timeout (no answer by the deadline), peer_unavailable "
            "(peer dead, connection lost or send queue full). Casts are not counted.",
            [({"outcome": o}, n) for o, n in (outcomes or {}).items()])
    _histogram(out, "iris_actor_call_duration_seconds",
               "Client-side latency of the actor calls the controller's node made, from send "
               "to reply or error reply (timeouts and dead peers are counted, not timed).",
               latency)
    _histogram(out, "iris_actor_handling_seconds",
               "Server-side time to handle a call, per actor the controller's process serves "
               "(controller, registry, regions): arguments decoded to reply encoded.",
               None, served, "actor")


def _shipping(out: list[str], shipping: Mapping[str, Any]) -> None:
    _family(out, "iris_log_shipping_lag_seconds", "gauge",
            "Log shipping lag, worst live task attempt over all workers: how old output was "
            "when its last chunk was stored, or the oldest output still unstored, whichever "
            "is larger. No samples until a worker reports.",
            [({}, shipping["max_flush_lag_s"])] if "max_flush_lag_s" in shipping else [])
    _family(out, "iris_log_dropped_lines_total", "counter",
            "Log lines dropped because shipping fell behind, summed over the live workers' "
            "lifetimes. No samples until a worker reports.",
            [({}, shipping["dropped_lines"])] if "dropped_lines" in shipping else [])


def _capacity(out: list[str], regions: list[Mapping[str, Any]] | None) -> None:
    """Autoscaler gauges; no samples when the controller runs no autoscaler."""
    slices, limits, backoff = [], [], []
    for region in regions or ():
        r = str(region.get("region", "?"))
        for g in region.get("groups", ()):
            name = str(g.get("group", "?"))
            for state, n in slice_counts(g).items():
                slices.append(({"region": r, "group": name, "state": state}, n))
            for bound in ("min", "max", "buffer"):
                if g.get(bound) is not None:
                    limits.append(({"region": r, "group": name, "bound": bound}, g[bound]))
            for zone, b in sorted((g.get("backoff") or {}).items()):
                backoff.append(({"region": r, "group": name, "zone": zone},
                                max(0.0, float(b.get("until_s", 0.0)))))
    _family(out, "iris_slices", "gauge",
            "Slices of each autoscaled scale group by state (READY, CREATING = booting, "
            "PREEMPTED, FAILED, DELETING).", slices)
    _family(out, "iris_scale_group_slice_limit", "gauge",
            "Configured slice bounds of each scale group: min, max and buffer (idle slices "
            "kept ready).", limits)
    _family(out, "iris_zone_backoff_seconds", "gauge",
            "Seconds until the autoscaler tries a zone again after a stock-out or error; "
            "zones not backing off have no sample.", backoff)


def _figures(out: list[str], figures: Mapping[str, Any] | None) -> None:
    """The live figures (controller/live_figures.py); no samples before the first point."""
    f = figures or {}
    pools = f.get("pools") or ()
    _family(out, "iris_pool_units", "gauge",
            "Units up and busy per accelerator type and region at the last sample (every "
            "10 s): chips on accelerator hosts, cores on CPU-only hosts (accelerator=cpu).",
            [({"accelerator": p["accelerator"], "region": p["region"], "state": k}, p[k])
             for p in pools for k in ("busy", "up")])
    _family(out, "iris_pool_utilization_ratio", "gauge",
            "Units busy / units up per accelerator type and region at the last sample.",
            [({"accelerator": p["accelerator"], "region": p["region"]}, p["utilization"])
             for p in pools if p.get("utilization") is not None])
    queue = f.get("queue") or {}
    out.append("# HELP iris_queue_time_seconds Time tasks waited from pending to assigned, "
               "by priority band, over the last 24 h (p50 and p90).")
    out.append("# TYPE iris_queue_time_seconds summary")
    for band, q in queue.items():
        for quantile, key in (("0.5", "p50_s"), ("0.9", "p90_s")):
            if q.get(key) is not None:
                out.append(f'iris_queue_time_seconds{{band="{_escape(band)}",'
                           f'quantile="{quantile}"}} {_number(q[key])}')
        out.append(f'iris_queue_time_seconds_sum{{band="{_escape(band)}"}} '
                   f'{_number(q.get("sum_s", 0.0))}')
        out.append(f'iris_queue_time_seconds_count{{band="{_escape(band)}"}} '
                   f'{_number(q.get("count", 0))}')
    _family(out, "iris_preemptions_total", "counter",
            "Attempts preempted since the controller started, by cause: evicted (a higher "
            "band or the cloud's notice), machine_lost (its worker or slice went away).",
            [({"cause": c}, n) for c, n in sorted((f.get("preemptions") or {}).items())])
    _family(out, "iris_wasted_chip_hours_total", "counter",
            "Accelerator chip-hours of work lost by preempted attempts (and gang members "
            "restarted with them) since the controller started: chips x the attempt's run, "
            "an upper bound, as Iris is not told when a job checkpointed.",
            [({}, f["wasted_chip_hours"])] if "wasted_chip_hours" in f else [])
    _family(out, "iris_fragmented_chips", "gauge",
            "Free accelerator chips no waiting multi-host gang can use (on partly busy "
            "slices, or of a type no waiting gang asks for) at the last sample; 0 when no "
            "gang waits.",
            [({}, f["fragmented_chips"])] if f.get("fragmented_chips") is not None else [])


def _histogram(out: list[str], name: str, help_text: str, data: Mapping | None,
               labelled: Mapping[str, Mapping] | None = None, label: str = "") -> None:
    """One histogram family: unlabelled `data`, or one series per `labelled` value."""
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} histogram")
    series = [("", data)] if data else []
    series += [(f'{label}="{_escape(v)}"', d) for v, d in sorted((labelled or {}).items())]
    for labels, d in series:
        if not d:
            continue
        pre = labels + "," if labels else ""
        for le, n in sorted(d["buckets"].items(), key=lambda kv: float(kv[0])):
            out.append(f'{name}_bucket{{{pre}le="{_number(float(le))}"}} {_number(n)}')
        out.append(f'{name}_bucket{{{pre}le="+Inf"}} {_number(d["count"])}')
        suffix = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{suffix} {_number(d['sum_s'])}")
        out.append(f"{name}_count{suffix} {_number(d['count'])}")


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
