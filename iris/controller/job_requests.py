"""Requests about jobs and live state, on the controller's turn: submit, kill, status, listings,
the snapshot. Requests that ControllerService (service.py) runs in its turn: each takes the
service and goes through its components' interfaces and its one path of change (`run_many`).
"""

from __future__ import annotations

import logging
from typing import Any

from iris.base.errors import InvalidRequestError, IrisError, NotFoundError
from iris.base.ids import new_id
from iris.controller import live_figures, scheduler_view
from iris.controller.jobs import events as ev
from iris.controller.jobs import views
from iris.controller.jobs.spec import decode_submission, validate_submit
from iris.controller.scheduling.dry_run import dry_run as dry_run_plan
from iris.controller.turns import now_mono, now_wall
from iris.wire import control

_log = logging.getLogger(__name__)


def submit(svc: Any, raw: Any, schedule: bool = True) -> dict:
    """Accept a job (a control.Submission, or its plain data from the wire); with
    `schedule`, place it in the same turn and transaction."""
    spec = _checked(svc, raw)
    # The submit and its placement commit in one transaction (one at a time: `submits`
    # is the path from the wire, one transaction for all that arrive together).
    effects = svc.run_many([ev.Submit(new_id("ev-"), spec)], schedule=schedule)
    accepted = next(e for e in effects if isinstance(e, ev.Accepted))
    return {"job_id": accepted.job_id, "duplicate": accepted.duplicate}


def submits(svc: Any, raws: list) -> list:
    """Many submissions that arrived together (the Controller actor's batch), in one
    turn: ONE transaction (one fsync) for all, and one pass, left for the end of the
    shell's queue while more requests wait there. Each is checked against the state as
    the ones before it left it (a child may follow its parent in one batch), and a bad one
    gets its own error while the rest go on. One answer per submission, in order (a dict,
    or the exception that caller gets); none is sent before the commit. If the store
    refuses the batch's data (memory is then reloaded from disk), each is tried again
    alone, so only the submission at fault fails."""
    answers: list = [None] * len(raws)
    each: list = []
    took: list[int] = []

    def checked_in_turn():  # read by run_many one event at a time, after the one before
        for i, raw in enumerate(raws):
            try:
                spec = _checked(svc, raw)
            except IrisError as exc:
                answers[i] = exc
                continue
            took.append(i)
            yield ev.Submit(new_id("ev-"), spec)

    try:
        svc.run_many(checked_in_turn(), schedule=True, later=True, each=each)
    except InvalidRequestError as exc:
        if len(took) > 1:
            return [_alone(svc, raw) for raw in raws]
        answers[took[0]] = exc
        return answers
    for i, outcome in zip(took, each, strict=True):
        answers[i] = _answer(outcome)
    return answers


def _alone(svc: Any, raw: Any) -> Any:
    try:
        return submit(svc, raw)
    except IrisError as exc:
        return exc


def _answer(outcome: Any) -> Any:
    """One submit's answer from its effects (or the kernel's refusal, as it was)."""
    if isinstance(outcome, Exception):
        return outcome
    accepted = next(e for e in outcome if isinstance(e, ev.Accepted))
    return {"job_id": accepted.job_id, "duplicate": accepted.duplicate}


def _checked(svc: Any, raw: Any) -> Any:
    """A submission checked against the live state: its JobSpec, or an IrisError."""
    sub = _submission(raw)
    if sub.bundle and not svc.bundles.has(sub.bundle):
        raise InvalidRequestError(f"bundle: {sub.bundle[:12]} was never uploaded "
                                  "(put_bundle first)", "bundle")
    spec = validate_submit(sub, parent=svc.parent_spec(sub.parent), fits=svc.catalogue())
    svc.budget_book.check_priority_cap(spec)  # the operator's cap on this user's band
    if spec.colocate and spec.colocate["job"] not in svc.state.jobs:
        raise InvalidRequestError(f"colocate_with: no job named {spec.colocate['job']!r}",
                                  "colocate_with")
    return spec


def dry_run(svc: Any, raw: Any) -> dict:
    """Would this submission fit now, and where (the real scheduler; changes nothing)."""
    sub = _submission(raw)
    spec = validate_submit(sub, parent=svc.parent_spec(sub.parent), fits=svc.catalogue())
    hosts = scheduler_view.host_views(svc.state, svc.desk.workers.workers.values(),
                                      svc.stopping)
    return dry_run_plan(hosts, scheduler_view.task_demands(spec, now_wall(svc)))


def check_submission(raw: Any) -> control.Submission:
    """A submission from the wire, decoded (InvalidRequestError names the bad field). Runs
    on the node's loop thread for batched submits (actor.py), off the controller's turn."""
    return _submission(raw)


def _submission(raw: Any) -> control.Submission:
    """The one decode of a submission: the sender built a control.Submission."""
    return raw if isinstance(raw, control.Submission) else decode_submission(raw)


def kill(svc: Any, job_id: str, reason: str = "killed by user") -> dict:
    svc.run_many([ev.Kill(new_id("ev-"), job_id, reason)])
    return views.job_view(svc.state, job_id, tasks=False)


def status(svc: Any, job_id: str) -> dict:
    view = views.job_view(svc.state, job_id)
    reasons = svc.placement.reasons(svc.state)
    if job_id in reasons:
        view["pending_reason"] = reasons[job_id]
    return view


def list_jobs(svc: Any, prefix: str | None = None, include_finished: bool = True) -> list[dict]:
    rows = views.list_jobs(svc.state, prefix=prefix, include_finished=include_finished)
    reasons = svc.placement.reasons(svc.state)
    for row in rows:
        if row["job_id"] in reasons:
            row["pending_reason"] = reasons[row["job_id"]]
    return rows


def results(svc: Any, job_id: str) -> dict[int, bytes]:
    if job_id not in svc.state.jobs:
        raise NotFoundError(f"no job {job_id}")
    return svc.store.results(job_id)


def list_workers(svc: Any) -> list[dict]:
    """Every worker's row, by worker id (the snapshot's list: 10,000 rows every 2 s at
    10,000 hosts, so the loop is kept tight)."""
    now = now_mono(svc)
    table, by_worker = svc.desk.workers, svc.state.by_worker
    workers, stalled = table.workers, table.stalled
    rows = []
    for worker_id in sorted(workers):
        row = workers[worker_id].as_dict(now, stalled)
        held = by_worker.get(worker_id)
        row["attempts"] = sorted(held) if held else []
        rows.append(row)
    return rows


def snapshot(svc: Any) -> dict:
    """Plain data for dashboards and metrics, built on the controller's thread."""
    counts: dict[str, int] = {}
    for job in svc.state.jobs.values():
        counts[job.state.value] = counts.get(job.state.value, 0) + 1
    return {
        "at": now_wall(svc), "workers": list_workers(svc),
        "pending_reasons": dict(svc.placement.reasons(svc.state)), "jobs_by_state": counts,
        "summary": svc.state.summary(), "pending_tasks": len(svc.state.pending),
        "log_shipping": svc.desk.log_shipping(),
        "scheduling_passes": svc.placement.pass_seconds.as_dict(),
        "gangs": {"reserving": len(svc.gangs.reserving), "placed": len(svc.gangs.placed)},
        "capacity": svc.pushes.capacity(),
        "unmet": {r: dict(g) for r, g in svc.pushes.unmet.items()},
        "figures": live_figures.summary(svc.figures, now_wall(svc)),
    }
