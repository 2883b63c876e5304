"""`iris job run --dry-run`: would this job fit now, and where; answered by the real scheduler.

Runs one `schedule` pass over the current fleet with only the job's tasks pending and
turns the plan into plain data for the CLI and the API. Changes nothing anywhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from iris.controller.scheduling.model import HostView, TaskDemand
from iris.controller.scheduling.scheduler import SchedulerConfig, schedule


def dry_run(hosts: Sequence[HostView], tasks: Sequence[TaskDemand],
            config: SchedulerConfig | None = None) -> dict[str, object]:
    """{"fits_now": bool, "placements": {task: host}, "gang_regions": {gang: [regions]},
    "would_evict": [attempt ids], "pending": {task: reason dict}, "summary": str}."""
    plan = schedule(hosts, tasks, config=config)
    placements = {a.task_id: a.host_id for a in plan.assignments}
    gangs = {g.gang_id: list(g.regions) for g in plan.gang_requests}
    in_gangs = {t for g in plan.gang_requests for t in g.task_ids}
    pending = {t: r.to_dict() for t, r in plan.reasons.items() if t not in in_gangs}
    fits = not pending
    codes = Counter(r["code"] for r in pending.values())
    summary = (f"fits now: {len(placements)} task(s) on {len(set(placements.values()))} "
               f"worker(s), {len(gangs)} gang(s) to reserve" if fits else
               "does not fit now: " + ", ".join(f"{n} {c}" for c, n in sorted(codes.items())))
    return {"fits_now": fits, "placements": placements, "gang_regions": gangs,
            "would_evict": [p.attempt_id for p in plan.preemptions], "pending": pending,
            "summary": summary}
