"""Finding the live attempt behind "job X, task N" for the inspector, on the controller's turn,
and the job summary. Checks, no I/O but the job store's reads and the exec note.

`locate` refuses, naming the problem, before anything is done: an unknown job, a task index
the job does not have, a task that runs nothing now (finished, or not started yet: its
state is named), a port name the job never asked for, an exec by someone who is neither the
job's owner nor an operator. An exec that is allowed is written into the job's events
(job_notes) before the worker is asked to run it.
"""

from __future__ import annotations

from typing import Any

from iris.base.errors import InvalidRequestError, NotFoundError, PermissionDeniedError
from iris.controller.jobs.model import TaskState
from iris.controller.turns import now_wall
from iris.controller.usage_view import job_summary
from iris.wire import schema

# What each kind of look needs of the task: its process running (stack, profile, exec),
# or only an attempt placed with its ports known (url).
_NEEDS_PROCESS = ("stack", "profile", "exec")
_ARGV_SHOWN = 512  # characters of an exec's command line kept in the job's events


def summary(svc: Any, job_id: str) -> dict:
    """`iris job summary`: per task and attempt, then the job's totals (usage_view.py)."""
    job_id = schema.text(job_id, "job_id")
    if job_id not in svc.state.jobs:
        raise NotFoundError(f"no job {job_id}")
    stored = svc.store.usage_of(job_id)
    return job_summary(svc.state, job_id, stored, svc.usage.points, svc.store.notes(job_id),
                       now_wall(svc))


def locate(svc: Any, raw: Any) -> dict:
    """The attempt and worker a look at a task goes to. `raw`: {job_id, task_index, kind
    ("stack", "profile", "exec", "url"), and for an exec `user`, `operator`, `argv`; for a
    url `port`}. Raises (changing nothing) when the look cannot be done."""
    if not isinstance(raw, dict):
        raise InvalidRequestError("expected a map with job_id, task_index and kind", "raw")
    job_id = schema.text(raw.get("job_id"), "job_id")
    kind = raw.get("kind")
    if kind not in (*_NEEDS_PROCESS, "url"):
        raise InvalidRequestError(f"kind: expected stack, profile, exec or url, got {kind!r}",
                                  "kind")
    job = svc.state.jobs.get(job_id)
    if job is None:
        raise NotFoundError(f"no job {job_id}")
    index = raw.get("task_index", 0)
    if isinstance(index, bool) or not isinstance(index, int) \
            or not 0 <= index < job.spec.num_tasks:
        raise NotFoundError(f"job {job_id} has no task {index!r} (its tasks: 0-"
                            f"{job.spec.num_tasks - 1})")
    if kind == "url" and raw.get("port") not in job.spec.resources.ports:
        _no_such_port(job, raw.get("port"))  # a mistake whatever state the task is in
    task = svc.state.tasks[(job_id, index)]
    attempt = svc.state.attempts.get(task.attempt_id or "")
    wanted = (TaskState.RUNNING,) if kind in _NEEDS_PROCESS else (
        TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING)
    if attempt is None or attempt.state not in wanted:
        now = task.state.value
        raise InvalidRequestError(f"task {index} of {job_id} is {now}: nothing of it runs to "
                                  f"{_verb(kind)}" + (" (it has not started yet)" if now in (
                                      "pending", "assigned", "building") else ""), "task")
    worker = svc.workers.workers.get(attempt.worker_id)
    if worker is None:
        raise InvalidRequestError(f"task {index} of {job_id}: its worker {attempt.worker_id} "
                                  "is not connected now", "task")
    target = {"job_id": job_id, "task_index": index, "attempt_id": attempt.attempt_id,
              "worker_id": worker.worker_id, "address": worker.address}
    if kind == "url":
        target.update(_port(svc, job, attempt.attempt_id, raw.get("port")))
    if kind == "exec":
        _allow_exec(svc, job, raw)
    return target


def _verb(kind: str) -> str:
    return {"stack": "take a stack of", "profile": "profile", "exec": "exec into",
            "url": "serve a port"}[kind]


def _no_such_port(job: Any, name: Any) -> None:
    asked = job.spec.resources.ports
    said = ", ".join(asked) if asked else "none"
    raise InvalidRequestError(f"job {job.job_id} asked for no port named {name!r} (its "
                              f"ports: {said}; ask with Resources(ports=[...]) or "
                              "iris job run --port NAME)", "port")


def _port(svc: Any, job: Any, attempt_id: str, name: Any) -> dict:
    stored = svc.store.usage_of(job.job_id).get(attempt_id)
    ports = svc.usage.ports_of(attempt_id, stored)
    if name not in ports:
        raise InvalidRequestError(f"port {name!r} of {job.job_id}: its task has not started "
                                  "yet, so no port is assigned", "port")
    return {"port": ports[name], "ports": ports}


def _allow_exec(svc: Any, job: Any, raw: dict) -> None:
    """The job's owner or an operator only; an allowed exec is noted in the job's events."""
    user = schema.text(raw.get("user"), "user", max_len=256)
    operator = raw.get("operator") is True
    if not operator and user != job.spec.user:
        raise PermissionDeniedError(f"exec into {job.job_id}: only its owner "
                                    f"({job.spec.user}) or an operator may; you are {user} "
                                    "(not permitted)")
    argv = raw.get("argv")
    if not isinstance(argv, list | tuple) or not argv:
        raise InvalidRequestError("argv: give the command to run, e.g. -- python -V", "argv")
    shown = " ".join(str(a) for a in argv)[:_ARGV_SHOWN]
    svc.store.add_note(job.job_id, now_wall(svc), "exec", {
        "user": user, "operator": operator, "task": raw.get("task_index", 0),
        "command": shown})
