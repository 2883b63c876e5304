"""Read-only views of the kernel state as plain dicts (for job.status(), `iris job list --json`,
the dashboard). No transitions, no I/O; msgpack- and JSON-safe.
"""

from __future__ import annotations

from typing import Any

from iris.base.errors import NotFoundError
from iris.controller.jobs.model import TERMINAL_JOB, Job
from iris.controller.jobs.state import KernelState


def job_view(state: KernelState, job_id: str, *, tasks: bool = True) -> dict[str, Any]:
    """One job: its state, why it ended, and (with `tasks`) each task's state and attempt."""
    job = state.jobs.get(job_id)
    if job is None:
        raise NotFoundError(f"no job {job_id}")
    view = _summary(job)
    if tasks:
        view["tasks"] = [_task_view(state, job_id, i) for i in range(job.spec.num_tasks)]
    return view


def list_jobs(state: KernelState, *, prefix: str | None = None,
              include_finished: bool = True) -> list[dict[str, Any]]:
    """Job summaries sorted by name; `prefix` "/alice" lists alice's jobs and their sub-jobs."""
    out = []
    for job_id in sorted(state.jobs):
        if prefix and not (job_id == prefix or job_id.startswith(prefix.rstrip("/") + "/")):
            continue
        job = state.jobs[job_id]
        if include_finished or job.state not in TERMINAL_JOB:
            out.append(_summary(job))
    return out


def _summary(job: Job) -> dict[str, Any]:
    spec = job.spec
    return {
        "job_id": job.job_id, "user": spec.user, "parent": spec.parent,
        "state": job.state.value, "error": job.error, "priority": spec.priority,
        "num_tasks": spec.num_tasks, "gang_size": spec.gang_size,
        "accelerators": list(spec.resources.tpu_alternatives) or (
            [spec.resources.accelerator] if spec.resources.accelerator else []),
        "existing_capacity_only": spec.existing_capacity_only,
        "colocate": dict(spec.colocate) if spec.colocate else None,
        "submitted_at": job.submitted_at, "finished_at": job.finished_at,
        "task_counts": {s.value: n for s, n in sorted(job.counts.items()) if n},
    }


def _task_view(state: KernelState, job_id: str, index: int) -> dict[str, Any]:
    task = state.tasks[(job_id, index)]
    spec = state.jobs[job_id].spec
    attempt = state.attempts.get(task.attempt_id) if task.attempt_id else None
    return {
        "index": index, "state": task.state.value, "error": task.error,
        "attempts": task.attempts, "failures": task.failures,
        "preemptions": task.preemptions, "has_result": task.has_result,
        "attempt_id": task.attempt_id, "worker_id": attempt.worker_id if attempt else None,
        "accelerator": (attempt.accelerator or spec.resources.accelerator) if attempt
        else None,
    }


def desired_attempts(state: KernelState, worker_id: str) -> list[dict[str, Any]]:
    """The attempts the controller wants running on `worker_id` (what a re-registering worker
    is told to keep; anything else it runs is to be killed)."""
    out = []
    for attempt_id in sorted(state.by_worker.get(worker_id, ())):
        attempt = state.attempts[attempt_id]
        out.append({"attempt_id": attempt_id, "job_id": attempt.job_id,
                    "task_index": attempt.task_index, "state": attempt.state.value})
    return out
