"""`iris job summary`: what each task and attempt of a job waited, ran and used. Pure: the
job's records, what the usage component kept, and `now` in; plain, JSON-safe dicts out.

Per attempt: queue time (placed how long after the job's submit, for a task's first
attempt, else after its previous attempt ended), start time (placed to running: bundle,
environment build, spawn), run time, how it ended (exit code, signal, "killed for memory"),
CPU seconds and mean cores, peak RSS against the memory asked for, disk, accelerator busy,
chip-hours; why it was retried, when it was. Per task, its attempts' series for the chart
(cores and memory over time). The job's totals add them up. Times are wall-clock epoch
seconds; durations seconds; sizes bytes.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Callable
from typing import Any

from iris.controller.jobs.model import ACTIVE_ATTEMPT, Attempt, Job
from iris.controller.jobs.state import KernelState
from iris.controller.jobs.usage_rows import Stored
from iris.controller.scheduler_view import attempt_resources
from iris.controller.scheduling.model import per_host_demand
from iris.controller.usage import Point

# Tasks whose series the summary carries (the first ones by index): a chart each is what a
# page shows, and 4,096 tasks' series would be megabytes every refresh. Their rows: all.
SERIES_TASKS = 64
_SHELL_SIGNAL_BASE = 128  # an exit code of 128+N is "killed by signal N" (shell rule)
OOM_TEXT = "out of memory"  # in an attempt's error when its cgroup's OOM killer ended it


def job_summary(state: KernelState, job_id: str, stored: dict[str, Stored],
                points: Callable[[str], list[Point]], notes: list[dict],
                now: float) -> dict[str, Any]:
    job = state.jobs[job_id]
    res = job.spec.resources
    by_task: dict[int, list[Attempt]] = {}
    for attempt_id in state.job_attempts.get(job_id, ()):
        attempt = state.attempts[attempt_id]
        by_task.setdefault(attempt.task_index, []).append(attempt)
    tasks = []
    for index in range(job.spec.num_tasks):
        task = state.tasks[(job_id, index)]
        attempts = sorted(by_task.get(index, []), key=lambda a: a.number)
        charted = index < SERIES_TASKS
        # Past the charted tasks, only a live attempt's readings are read (its totals so far).
        pts = {a.attempt_id: points(a.attempt_id) if charted or a.state in ACTIVE_ATTEMPT
               else [] for a in attempts}
        rows = _attempt_rows(job, attempts, stored, pts, now)
        tasks.append({"index": index, "state": task.state.value, "attempts": rows,
                      "series": [p for a in attempts for p in _chart(a, pts[a.attempt_id])]
                      if charted else []})
    return {"job_id": job_id, "state": job.state.value, "user": job.spec.user,
            "submitted_at": job.submitted_at, "finished_at": job.finished_at,
            "request": {"cpu": res.cpu, "memory_bytes": res.memory_bytes,
                        "accelerator": res.accelerator, "ports": list(res.ports)},
            "tasks": tasks, "totals": _totals(tasks), "events": notes, "at": now,
            "series_tasks": min(job.spec.num_tasks, SERIES_TASKS)}


def _attempt_rows(job: Job, attempts: list[Attempt], stored: dict[str, Stored],
                  pts: dict[str, list[Point]], now: float) -> list[dict[str, Any]]:
    rows, previous_end = [], job.submitted_at
    for i, a in enumerate(attempts):
        row = stored.get(a.attempt_id)
        totals = (row.totals if row else None) or _so_far(pts[a.attempt_id])
        end = a.finished_at if a.finished_at is not None else (
            now if a.state in ACTIVE_ATTEMPT else None)
        run_s = max(0.0, end - a.started_at) if a.started_at is not None and end else None
        cpu_s = totals.get("cpu_s")
        chips = per_host_demand(attempt_resources(job.spec, a.accelerator)).chips
        peak = totals.get("peak_rss_bytes")
        request = job.spec.resources.memory_bytes
        retried = i < len(attempts) - 1
        rows.append({
            "number": a.number, "attempt_id": a.attempt_id, "worker_id": a.worker_id,
            "state": a.state.value, "live": a.state in ACTIVE_ATTEMPT,
            "assigned_at": a.assigned_at, "started_at": a.started_at,
            "finished_at": a.finished_at,
            "queue_s": _round(max(0.0, a.assigned_at - previous_end)) if previous_end else None,
            "start_s": _round(max(0.0, a.started_at - a.assigned_at))
            if a.started_at is not None else None,
            "run_s": _round(run_s), "exit_code": a.exit_code, "signal": _signal_of(a.exit_code),
            "ended": ended_text(a, totals),
            "killed_for_memory": bool(totals.get("oom_killed")) or OOM_TEXT in a.error,
            "cpu_s": cpu_s, "mean_cores": _round(cpu_s / run_s) if cpu_s is not None
            and run_s else None,
            "peak_rss_bytes": peak, "peak_memory_bytes": totals.get("peak_memory_bytes"),
            "memory_request_bytes": request or None,
            "peak_of_request": _round(peak / request, 3) if peak and request else None,
            "disk_bytes": totals.get("disk_bytes"), "accel_busy": totals.get("accel_busy"),
            "chips": chips, "chip_hours": _round(chips * run_s / 3600.0, 4) if run_s else 0.0,
            "retried_because": _first_line(a.error) if retried else None,
            "error": a.error, "usage_final": bool(row and row.totals)})
        previous_end = a.finished_at or previous_end
    return rows


def _so_far(points: list[Point]) -> dict:
    """A running attempt's totals from its readings: CPU so far, the largest RSS seen."""
    if not points:
        return {}
    charged = [p[3] for p in points if p[3] is not None]
    return {"cpu_s": points[-1][1], "peak_rss_bytes": max(p[2] for p in points),
            "peak_memory_bytes": max(charged) if charged else None,
            "disk_bytes": next((p[4] for p in reversed(points) if p[4] is not None), None)}


def ended_text(a: Attempt, totals: dict) -> str:
    """How an attempt ended, in the words a person looks for."""
    if a.state in ACTIVE_ATTEMPT:
        return a.state.value
    if totals.get("oom_killed") or OOM_TEXT in a.error:
        return "killed for memory (OOM in its cgroup)"
    sig, said = _signal_of(a.exit_code), _first_line(a.error)
    if sig:
        return said if said.startswith("killed by") else f"killed by {sig}" + (
            f": {said}" if said else "")
    if a.exit_code is not None:
        return f"exit {a.exit_code}"
    return _first_line(a.error) or a.state.value


def _signal_of(code: int | None) -> str | None:
    if code is None or not _SHELL_SIGNAL_BASE < code <= _SHELL_SIGNAL_BASE + 64:
        return None
    try:
        return _signal.Signals(code - _SHELL_SIGNAL_BASE).name
    except ValueError:
        return f"signal {code - _SHELL_SIGNAL_BASE}"


def _chart(a: Attempt, points: list[Point]) -> list[dict[str, Any]]:
    """One chart point per reading: cores used since the previous reading of the same
    attempt, resident and charged memory."""
    out, last = [], None
    for at, cpu_s, rss, memory, _disk, accel in points:
        cores = None
        if last is not None and at > last[0]:
            cores = _round(max(0.0, cpu_s - last[1]) / (at - last[0]), 3)
        out.append({"at": at, "attempt": a.number, "cores": cores, "rss_bytes": rss,
                    "memory_bytes": memory, "accel_busy": accel})
        last = (at, cpu_s)
    return out


def _totals(tasks: list[dict]) -> dict[str, Any]:
    rows = [r for t in tasks for r in t["attempts"]]
    cpu = [r["cpu_s"] for r in rows if r["cpu_s"] is not None]
    peaks = [r["peak_rss_bytes"] for r in rows if r["peak_rss_bytes"]]
    return {"attempts": len(rows), "retries": sum(max(0, len(t["attempts"]) - 1)
                                                   for t in tasks),
            "cpu_s": _round(sum(cpu)) if cpu else None,
            "run_s": _round(sum(r["run_s"] or 0.0 for r in rows)),
            "chip_hours": _round(sum(r["chip_hours"] or 0.0 for r in rows), 4),
            "peak_rss_bytes": max(peaks) if peaks else None,
            "killed_for_memory": sum(1 for r in rows if r["killed_for_memory"])}


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""
