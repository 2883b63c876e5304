"""The job kernel: handle(state, event, now) -> (state, effects). No sockets, no clock, no disk.

Deterministic: the same events with the same `now` give the same states and effects, so a
logged event sequence replays exactly. For speed the state is changed in place (copying
thousands of jobs per event would not reach thousands of events/s); every handler checks the
event fully before touching anything, so a refused event (an exception, or an `Ignored`
effect) changes nothing. `now` is wall-clock seconds: it is stored, and deadlines must mean
the same after a restart.

The caller commits the `Persist` effect (always first) before acting on the others or
answering anyone: that is what makes an acknowledged submit or transition durable.

Task transitions (attempt = the task's current attempt, fenced by its attempt id)

    from                       event                          to
    PENDING                    Assign                         ASSIGNED   (+ StartAttempt)
    ASSIGNED                   AttemptBuilding                BUILDING
    ASSIGNED, BUILDING         AttemptRunning                 RUNNING
    ASSIGNED..RUNNING          AttemptExited(0)               SUCCEEDED  (result stored)
    ASSIGNED..RUNNING          AttemptExited(!=0), timeout    PENDING if failures <= max_retries_failure
                                                              else FAILED (what it raised stored)
    ASSIGNED..RUNNING          Preempted                      PENDING if preemptions <= max_retries_preemption
                                                              else PREEMPTED
    ASSIGNED..RUNNING          WorkerLost, Reconcile(missing) PENDING (same budget) else WORKER_FAILED
    PENDING                    Tick past scheduling timeout   UNSCHEDULABLE
    any live                   Kill, job ended                KILLED     (+ StopAttempt)
    live gang member           another member retried         PENDING    (no budget spent)
    live gang member           another member ended           KILLED

A Reconcile keeps attempts the worker runs that the controller wants, stops those it does
not want, re-sends StartAttempt for wanted ASSIGNED ones it lacks, and treats wanted
BUILDING/RUNNING ones it lacks as lost (WorkerLost for that attempt).

Job state is derived from its tasks (model.derive_job_state). When it ends (SUCCEEDED,
FAILED, WORKER_FAILED, UNSCHEDULABLE, KILLED) its live tasks are killed, `JobFinished` is
emitted, and its live sub-jobs are killed too: a sub-job never outlives its parent. Too many
failed tasks (> max_task_failures) therefore kill the rest of the job.
"""

from __future__ import annotations

from collections.abc import Callable

from iris.base.errors import ConflictError, InvalidRequestError, NotFoundError
from iris.controller.jobs import lifecycle as lc
from iris.controller.jobs.events import (
    Accepted,
    Assign,
    AttemptBuilding,
    AttemptExited,
    AttemptRunning,
    Effect,
    Event,
    Ignored,
    Kill,
    Preempted,
    Prune,
    Reconcile,
    StartAttempt,
    StopAttempt,
    Submit,
    Tick,
    WorkerLost,
)
from iris.controller.jobs.model import (
    ACTIVE_ATTEMPT,
    TERMINAL_JOB,
    Attempt,
    Job,
    Task,
    TaskState,
)
from iris.controller.jobs.state import KernelState


def handle(state: KernelState, event: Event, now: float) -> tuple[KernelState, list[Effect]]:
    """Apply one event. Raises InvalidRequestError / NotFoundError / ConflictError for bad
    requests (nothing changed); returns `Ignored` for stale or moot events (nothing changed)."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise InvalidRequestError(f"unknown event type {type(event).__name__}", "event")
    tx = lc.Tx(state, event.event_id, type(event).__name__, now)
    handler(tx, event)
    return state, tx.finish()


def _submit(tx: lc.Tx, ev: Submit) -> None:
    state, spec = tx.state, ev.spec
    if spec.request_id and spec.request_id in state.requests:
        job_id = state.requests[spec.request_id]
        if job_id != spec.name:
            raise ConflictError(f"request_id {spec.request_id!r} already made job {job_id}")
        tx.effects.append(Accepted(job_id, duplicate=True))
        return
    if spec.parent is not None:
        parent = state.jobs.get(spec.parent)
        if parent is None or parent.state in TERMINAL_JOB:
            why = "no such job" if parent is None else f"it has ended ({parent.state.value})"
            raise InvalidRequestError(f"parent: cannot submit under {spec.parent}: {why}",
                                      "parent")
    old = state.jobs.get(spec.name)
    base = _replace_finished(tx, old) if old is not None else 0
    if spec.parent is not None:
        base = max(base, state.jobs[spec.parent].first_attempt)
    job = Job(spec=spec, submitted_at=tx.now, counts={TaskState.PENDING: spec.num_tasks},
              first_attempt=base)
    state.add_job(job)
    tx.touch(job)
    for index in range(spec.num_tasks):
        task = Task(job_id=spec.name, index=index)
        state.tasks[task.key] = task
        state.set_pending(task, tx.now)
        tx.touch(task)
    tx.effects.append(Accepted(spec.name, duplicate=False))


def _replace_finished(tx: lc.Tx, old: Job) -> int:
    """A name may be reused once its job (and so every sub-job) has ended. Returns the
    attempt number the new job starts from: past every number the family used."""
    family = [old, *tx.state.descendants(old.job_id)]
    live = [j.job_id for j in family if j.state not in TERMINAL_JOB]
    if live:
        raise ConflictError(f"name: job {live[0]} is still {tx.state.jobs[live[0]].state.value}")
    base = 0
    for job in family:
        used = max((tx.state.tasks[(job.job_id, i)].attempts
                    for i in range(job.spec.num_tasks)), default=0)
        base = max(base, job.first_attempt + used)
        tx.state.delete_job(job.job_id)
        tx.deleted.append(job.job_id)
    return base


def _assign(tx: lc.Tx, ev: Assign) -> None:
    state = tx.state
    seen: set[tuple[str, int]] = set()
    new_ids: set[str] = set()
    for p in ev.placements:
        task = state.tasks.get((p.job_id, p.task_index))
        if task is None:
            raise NotFoundError(f"no task {p.job_id}[{p.task_index}]")
        if p.attempt_id in state.attempts or p.attempt_id in new_ids or task.key in seen:
            raise ConflictError(f"assign: attempt {p.attempt_id} or task {task.key} repeated")
        seen.add(task.key)
        new_ids.add(p.attempt_id)
    _check_whole_gangs(state, seen)
    for p in ev.placements:
        task = state.tasks[(p.job_id, p.task_index)]
        if task.state is not TaskState.PENDING:
            tx.effects.append(Ignored(ev.event_id, f"task {p.job_id}[{p.task_index}] is "
                                                   f"{task.state.value}, not pending"))
            return
    for p in ev.placements:
        task = state.tasks[(p.job_id, p.task_index)]
        job = state.jobs[p.job_id]
        attempt = Attempt(p.attempt_id, p.job_id, p.task_index, job.first_attempt + task.attempts,
                          p.worker_id,
                          assigned_at=tx.now, accelerator=p.accelerator)
        state.add_attempt(attempt)
        state.pending.pop(task.key, None)
        state.set_task_state(task, TaskState.ASSIGNED)
        task.attempt_id, task.pending_since = p.attempt_id, None
        task.attempts += 1
        tx.touch(task, attempt)
        tx.effects.append(StartAttempt(p.worker_id, p.attempt_id, p.job_id, p.task_index,
                                       job.spec.num_tasks, job.spec.gang_size))
        lc.update_job(tx, job)


def _check_whole_gangs(state: KernelState, keys: set[tuple[str, int]]) -> None:
    for job_id, index in keys:
        size = state.jobs[job_id].spec.gang_size
        first = index - index % size
        if any((job_id, i) not in keys for i in range(first, first + size)):
            raise InvalidRequestError(
                f"assign: {job_id} tasks {first}-{first + size - 1} form one gang and must be "
                "placed together", "placements")


def _current(tx: lc.Tx, event_id: str, attempt_id: str) -> tuple[Task, Attempt] | None:
    """The attempt and its task if the attempt is the task's live current one (the fence).
    Otherwise log why (and stop a known attempt a worker should not be running)."""
    attempt = tx.state.attempts.get(attempt_id)
    if attempt is None:
        tx.effects.append(Ignored(event_id, f"unknown attempt {attempt_id}"))
        return None
    task = tx.state.tasks[(attempt.job_id, attempt.task_index)]
    if task.attempt_id == attempt_id and attempt.state in ACTIVE_ATTEMPT:
        return task, attempt
    tx.effects.append(Ignored(event_id, f"stale attempt {attempt_id} ({attempt.state.value})"))
    return None


def _building(tx: lc.Tx, ev: AttemptBuilding) -> None:
    found = _current(tx, ev.event_id, ev.attempt_id)
    if found is None:
        return _stop_if_stale(tx, ev.attempt_id)
    task, attempt = found
    if attempt.state is TaskState.ASSIGNED:
        attempt.state = TaskState.BUILDING
        tx.state.set_task_state(task, TaskState.BUILDING)
        tx.touch(task, attempt)
        lc.update_job(tx, tx.state.jobs[task.job_id])


def _running(tx: lc.Tx, ev: AttemptRunning) -> None:
    found = _current(tx, ev.event_id, ev.attempt_id)
    if found is None:
        return _stop_if_stale(tx, ev.attempt_id)
    task, attempt = found
    if attempt.state is TaskState.RUNNING:
        return
    attempt.state = TaskState.RUNNING
    tx.state.set_task_state(task, TaskState.RUNNING)
    tx.state.attempt_started(attempt, tx.now)
    tx.touch(task, attempt)
    timeout = tx.state.jobs[task.job_id].spec.timeout_s
    if timeout is not None:
        tx.state.add_deadline(tx.now + timeout, "timeout", (attempt.attempt_id,))
    lc.update_job(tx, tx.state.jobs[task.job_id])


def _stop_if_stale(tx: lc.Tx, attempt_id: str) -> None:
    """A worker says it runs an attempt the controller gave up on: stop it (fencing)."""
    attempt = tx.state.attempts.get(attempt_id)
    if attempt is not None and attempt.exit_code is None:
        tx.effects.append(StopAttempt(attempt.worker_id, attempt_id,
                                      tx.state.config.stop_grace_s, "stale attempt"))


def _exited(tx: lc.Tx, ev: AttemptExited) -> None:
    found = _current(tx, ev.event_id, ev.attempt_id)
    if found is None:
        return
    task, attempt = found
    attempt.exit_code = ev.exit_code
    if ev.exit_code != 0:
        reason = ev.error or f"exit code {ev.exit_code}"
        lc.attempt_ended(tx, task, attempt, TaskState.FAILED, reason)
        if task.state is TaskState.FAILED and ev.result is not None:
            # It failed for good: keep what it raised, so the caller gets that exception.
            task.has_result = True
            tx.results.append((task.job_id, task.index, ev.result))
        return None
    lc.stop(tx, attempt, TaskState.SUCCEEDED, "")
    task.error = ""
    lc.end_task(tx, task, TaskState.SUCCEEDED, "")
    if ev.result is not None:
        task.has_result = True
        tx.results.append((task.job_id, task.index, ev.result))
    lc.update_job(tx, tx.state.jobs[task.job_id])


def _preempted(tx: lc.Tx, ev: Preempted) -> None:
    found = _current(tx, ev.event_id, ev.attempt_id)
    if found is not None:
        lc.attempt_ended(tx, *found, TaskState.PREEMPTED, ev.reason, grace_s=ev.grace_s)


def _worker_lost(tx: lc.Tx, ev: WorkerLost) -> None:
    held = sorted(tx.state.by_worker.get(ev.worker_id, ()))
    if not held:
        tx.effects.append(Ignored(ev.event_id, f"worker {ev.worker_id} held no attempts"))
    for attempt_id in held:
        attempt = tx.state.attempts[attempt_id]
        if attempt.state in ACTIVE_ATTEMPT:   # a gang restart above may have ended it
            task = tx.state.tasks[(attempt.job_id, attempt.task_index)]
            lc.attempt_ended(tx, task, attempt, TaskState.WORKER_FAILED,
                             f"{ev.reason} ({ev.worker_id})", notify=False)


def _kill(tx: lc.Tx, ev: Kill) -> None:
    job = tx.state.jobs.get(ev.job_id)
    if job is None:
        raise NotFoundError(f"no job {ev.job_id}")
    if job.state in TERMINAL_JOB:
        tx.effects.append(Ignored(ev.event_id, f"job {ev.job_id} already {job.state.value}"))
        return
    lc.kill_job(tx, job, ev.reason)


def _tick(tx: lc.Tx, ev: Tick) -> None:
    state = tx.state
    for kind, key in state.pop_due(tx.now):
        if kind == "timeout":
            attempt = state.attempts.get(key[0])
            task = state.tasks.get((attempt.job_id, attempt.task_index)) if attempt else None
            if task is not None and task.attempt_id == attempt.attempt_id \
                    and attempt.state is TaskState.RUNNING:
                limit = state.jobs[task.job_id].spec.timeout_s
                lc.attempt_ended(tx, task, attempt, TaskState.FAILED, f"timed out after {limit}s")
        else:
            job_id, index, since = key
            task = state.tasks.get((job_id, index))
            if task is not None and task.state is TaskState.PENDING \
                    and task.pending_since == since:
                limit = state.jobs[job_id].spec.scheduling_timeout_s
                lc.end_task(tx, task, TaskState.UNSCHEDULABLE,
                            f"not scheduled within {limit}s")
                lc.update_job(tx, state.jobs[job_id])


def _reconcile(tx: lc.Tx, ev: Reconcile) -> None:
    state = tx.state
    wanted = state.by_worker.get(ev.worker_id, set())
    reported = set(ev.running)
    for attempt_id in sorted(reported - wanted):
        tx.effects.append(StopAttempt(ev.worker_id, attempt_id, state.config.stop_grace_s,
                                      "not wanted by the controller"))
    for attempt_id in sorted(wanted - reported):
        attempt = state.attempts[attempt_id]
        if attempt.state not in ACTIVE_ATTEMPT:
            continue
        task = state.tasks[(attempt.job_id, attempt.task_index)]
        if attempt.state is TaskState.ASSIGNED:
            job = state.jobs[attempt.job_id]
            tx.effects.append(StartAttempt(ev.worker_id, attempt_id, task.job_id, task.index,
                                           job.spec.num_tasks, job.spec.gang_size))
        else:
            lc.attempt_ended(tx, task, attempt, TaskState.WORKER_FAILED,
                             f"worker {ev.worker_id} no longer runs it", notify=False)


def _prune(tx: lc.Tx, ev: Prune) -> None:
    cutoff = tx.now - ev.retention_s
    old = [j.job_id for j in tx.state.jobs.values()
           if j.state in TERMINAL_JOB and j.finished_at is not None and j.finished_at <= cutoff]
    for job_id in old:
        tx.state.delete_job(job_id)
        tx.deleted.append(job_id)


_HANDLERS: dict[type, Callable[[lc.Tx, Event], None]] = {
    Submit: _submit, Assign: _assign, AttemptBuilding: _building, AttemptRunning: _running,
    AttemptExited: _exited, Preempted: _preempted, WorkerLost: _worker_lost, Kill: _kill,
    Tick: _tick, Reconcile: _reconcile, Prune: _prune,
}
