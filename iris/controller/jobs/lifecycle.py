"""Shared transitions of the job kernel: ending an attempt, spending a retry budget, restarting a
gang, finishing a job and cascading the end to its sub-jobs. Not the event dispatch (kernel.py).

Every change goes through a Tx, which remembers what was touched so the event ends with one
Persist effect holding copies of exactly the changed records.
"""

from __future__ import annotations

from iris.controller.jobs.events import Effect, JobFinished, Persist, StopAttempt
from iris.controller.jobs.model import (
    ACTIVE_ATTEMPT,
    FAILED_TASK,
    TERMINAL_JOB,
    TERMINAL_TASK,
    Attempt,
    Job,
    JobState,
    Task,
    TaskState,
    derive_job_state,
)
from iris.controller.jobs.state import KernelState

_CAUSES = FAILED_TASK | {TaskState.UNSCHEDULABLE, TaskState.KILLED}


class Tx:
    """The changes one event makes: touched records, results, deletions and other effects."""

    def __init__(self, state: KernelState, event_id: str, kind: str, now: float):
        self.state = state
        self.event_id = event_id
        self.kind = kind
        self.now = now
        self.jobs: dict[str, Job] = {}
        self.tasks: dict[tuple[str, int], Task] = {}
        self.attempts: dict[str, Attempt] = {}
        self.results: list[tuple[str, int, bytes]] = []
        self.deleted: list[str] = []
        self.effects: list[Effect] = []

    def touch(self, *records: Job | Task | Attempt) -> None:
        for rec in records:
            if isinstance(rec, Task):
                self.tasks[rec.key] = rec
            elif isinstance(rec, Attempt):
                self.attempts[rec.attempt_id] = rec
            else:
                self.jobs[rec.job_id] = rec

    def finish(self) -> list[Effect]:
        """Persist first (commit before acting), then the other effects in order."""
        if not (self.jobs or self.tasks or self.attempts or self.results or self.deleted):
            return self.effects
        live = self.state.jobs
        persist = Persist(
            event_id=self.event_id, kind=self.kind, at=self.now,
            # __copy__ itself (model.py): copy.copy's dispatch was a fifth of each copy.
            jobs=tuple(j.__copy__() for j in self.jobs.values() if j.job_id in live),
            tasks=tuple(t.__copy__() for t in self.tasks.values() if t.job_id in live),
            attempts=tuple(a.__copy__() for a in self.attempts.values() if a.job_id in live),
            results=tuple(self.results), deleted_jobs=tuple(self.deleted))
        return [persist, *self.effects]


def stop(tx: Tx, attempt: Attempt, state: TaskState, reason: str, notify: bool = True,
         grace_s: float | None = None) -> None:
    """End an active attempt in `state`; tell its worker to stop it unless it already exited
    (or, `notify` False, the worker is gone), within `grace_s` (default stop_grace_s)."""
    if attempt.state not in ACTIVE_ATTEMPT:
        return
    attempt.state = state
    attempt.finished_at = tx.now
    attempt.error = attempt.error or reason
    tx.state.release_attempt(attempt)
    tx.touch(attempt)
    if notify and attempt.exit_code is None:
        grace = tx.state.config.stop_grace_s if grace_s is None else grace_s
        tx.effects.append(StopAttempt(attempt.worker_id, attempt.attempt_id, grace, reason))


def end_task(tx: Tx, task: Task, state: TaskState, error: str) -> None:
    """Move a task to a terminal state, stopping its current attempt if it still holds one."""
    attempt = tx.state.attempts.get(task.attempt_id) if task.attempt_id else None
    if attempt is not None:
        stop(tx, attempt, TaskState.KILLED if state is TaskState.KILLED else state, error)
    tx.state.pending.pop(task.key, None)
    tx.state.set_task_state(task, state)
    task.finished_at = tx.now
    task.error = error or task.error
    tx.touch(task)


def attempt_ended(tx: Tx, task: Task, attempt: Attempt, state: TaskState, error: str,
                  notify: bool = True, grace_s: float | None = None) -> None:
    """The current attempt ended badly (`state` FAILED, PREEMPTED or WORKER_FAILED): spend the
    matching budget, then retry the task or end it, and restart or end the rest of its gang."""
    stop(tx, attempt, state, error, notify, grace_s)
    spec = tx.state.jobs[task.job_id].spec
    task.error = error
    if state is TaskState.FAILED:
        task.failures += 1
        retry = task.failures <= spec.max_retries_failure
    else:
        task.preemptions += 1
        retry = task.preemptions <= spec.max_retries_preemption
    if retry:
        tx.state.set_pending(task, tx.now)
        tx.touch(task)
    else:
        end_task(tx, task, state, f"{error} (retry budget spent)")
    if spec.gang_size > 1:
        _restart_gang(tx, task, ended=not retry)
    update_job(tx, tx.state.jobs[task.job_id])


def _restart_gang(tx: Tx, task: Task, ended: bool) -> None:
    """A gang runs as one program: when one member leaves, the others cannot continue. They go
    back to PENDING without spending their budgets, or end KILLED if the member ended for good."""
    size = tx.state.jobs[task.job_id].spec.gang_size
    first = task.index - task.index % size
    reason = f"gang member {task.index} {'ended' if ended else 'is being retried'}"
    for index in range(first, first + size):
        sibling = tx.state.tasks[(task.job_id, index)]
        if sibling is task or sibling.state in TERMINAL_TASK:
            continue
        if ended:
            end_task(tx, sibling, TaskState.KILLED, reason)
            continue
        attempt = tx.state.attempts.get(sibling.attempt_id) if sibling.attempt_id else None
        if attempt is not None:
            stop(tx, attempt, TaskState.KILLED, reason)
            tx.state.set_pending(sibling, tx.now)
            tx.touch(sibling)


def update_job(tx: Tx, job: Job) -> None:
    """Recompute a live job's state; if it just ended, finish it."""
    if job.state in TERMINAL_JOB:
        return
    new = derive_job_state(job, job.counts)
    if new is job.state:
        return
    job.state = new
    tx.touch(job)
    if new in TERMINAL_JOB:
        _finish_job(tx, job)


def _finish_job(tx: Tx, job: Job) -> None:
    """Stop what is left of the job, record why it ended, and end its live sub-jobs."""
    job.finished_at = tx.now
    if not job.error and job.state is not JobState.SUCCEEDED:
        # Name the task that caused it, not a gang sibling killed because of it.
        bad = sorted((t for t in tx.state.job_tasks(job.job_id)
                      if t.error and t.state in _CAUSES),
                     key=lambda t: (t.state is TaskState.KILLED, t.finished_at or 0.0))
        job.error = f"task {bad[0].index}: {bad[0].error}" if bad else job.state.value
    for task in tx.state.job_tasks(job.job_id):
        if task.state not in TERMINAL_TASK:
            end_task(tx, task, TaskState.KILLED, f"job {job.state.value}")
    tx.effects.append(JobFinished(job.job_id, job.state, job.error))
    for child in list(tx.state.descendants(job.job_id)):
        kill_job(tx, child, f"parent {job.job_id} ended ({job.state.value})")


def kill_job(tx: Tx, job: Job, reason: str) -> None:
    """Kill a live job (and, through _finish_job, its sub-jobs)."""
    if job.state in TERMINAL_JOB:
        return
    job.killed = True
    job.error = reason
    tx.touch(job)
    for task in tx.state.job_tasks(job.job_id):
        if task.state not in TERMINAL_TASK:
            end_task(tx, task, TaskState.KILLED, reason)
    update_job(tx, job)
