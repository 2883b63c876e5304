"""What the job page shows beyond the store's rows: what runs, with what, and for how long.

Pure: a job view from reads.py and `now` (wall-clock epoch seconds) in, plain dicts out. Not
the store and not the page. Every time here is wall-clock epoch seconds, as the store keeps
them; durations are seconds.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from iris.base.resources import human_bytes

_RAW_BYTES = re.compile(r"\b(\d{7,}) ?bytes\b|\b(memory|disk)=(\d{7,})\b")




def humanize(text: str) -> str:
    """Raw byte counts in a reason or error ('limit 2147483648 bytes', 'memory=2147483648')
    as a person reads them ('limit 2 GiB', 'memory=2 GiB')."""
    def one(m: re.Match) -> str:
        if m.group(1):
            return human_bytes(int(m.group(1)))
        return f"{m.group(2)}={human_bytes(int(m.group(3)))}"
    return _RAW_BYTES.sub(one, text or "")


def what_runs(spec: dict[str, Any]) -> dict[str, str]:
    """{'kind': 'command', 'text': 'python train.py'} or the function's name."""
    entry = spec.get("entrypoint") or {}
    if entry.get("kind") == "command":
        return {"kind": "command", "text": shlex.join(entry.get("argv") or [])}
    name = spec.get("function") or "a Python function"
    return {"kind": "function", "text": name}


def resources_text(resources: dict[str, Any] | None) -> str:
    """'cpu 2 · memory 4 GiB · tpu v5litepod-16' (nothing asked for: 'cpu 1')."""
    r = resources or {}
    parts = [f"cpu {r.get('cpu', 1):g}"]
    if r.get("memory"):
        parts.append(f"memory {human_bytes(r['memory'])}")
    if r.get("disk"):
        parts.append(f"disk {human_bytes(r['disk'])}")
    if r.get("tpu"):
        parts.append(f"tpu {r['tpu']}")
    if r.get("gpu"):
        parts.append(f"gpu {r.get('count') or 1}× {r['gpu']}")
    return " · ".join(parts)


def durations(view: dict[str, Any], now: float) -> dict[str, float | None]:
    """queued_s: submit to the first attempt running (so far, if none runs yet);
    running_s: first attempt running to the job's end (or now). None: not reached."""
    submitted = view.get("submitted_at")
    starts = [a["started_at"] for t in view.get("tasks", ()) for a in t.get("attempt_list", ())
              if a.get("started_at")]
    end = view.get("finished_at")
    first = min(starts) if starts else None
    if submitted is None:
        return {"queued_s": None, "running_s": None}
    queued = (first if first is not None else (end or now)) - submitted
    running = ((end or now) - first) if first is not None else None
    return {"queued_s": round(max(0.0, queued), 3),
            "running_s": None if running is None else round(max(0.0, running), 3)}


def timeline(view: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """One bar per attempt, in seconds from the job's submission: assigned, running from,
    ended at (now for a live one), its state and how it ended."""
    t0 = view.get("submitted_at") or 0.0
    bars = []
    for task in view.get("tasks", ()):
        for a in task.get("attempt_list", ()):
            end = a.get("finished_at")
            bars.append({
                "task": task["index"], "attempt": a["number"], "state": a["state"],
                "worker_id": a.get("worker_id"), "exit_code": a.get("exit_code"),
                "error": humanize(a.get("error", "")),
                "assigned_s": _since(a.get("assigned_at"), t0),
                "started_s": _since(a.get("started_at"), t0),
                "ended_s": _since(end if end is not None else now, t0),
                "live": end is None})
    return bars


def _since(ts: float | None, t0: float) -> float | None:
    return None if not ts else round(max(0.0, ts - t0), 3)


def enrich(view: dict[str, Any], now: float) -> dict[str, Any]:
    """The job view with what the page shows on top: what runs, resources in human units,
    durations, the attempts timeline, and raw byte counts in reasons made readable."""
    spec = view.get("spec") or {}
    view["runs"] = what_runs(spec)
    view["resources_text"] = resources_text(spec.get("resources"))
    view["durations"] = durations(view, now)
    view["timeline"] = timeline(view, now)
    view["error"] = humanize(view.get("error", ""))
    for task in view.get("tasks", ()):
        task["error"] = humanize(task.get("error", ""))
    if view.get("pending_reason"):
        view["pending_reason"] = {**view["pending_reason"],
                                  "message": humanize(view["pending_reason"].get("message", ""))}
    return view
