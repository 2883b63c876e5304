"""The job kernel's state: the records plus the indexes that keep each event O(its own tasks).

Not the transitions (kernel.py) and not persistence (store.py). `from_records` rebuilds every
index from stored records, which is how a restarted controller gets its state back.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from iris.controller.jobs.model import (
    ACTIVE_ATTEMPT,
    TERMINAL_JOB,
    Attempt,
    Job,
    Task,
    TaskState,
    count_states,
)

TaskKey = tuple[str, int]


@dataclass(frozen=True)
class KernelConfig:
    stop_grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL when an attempt is stopped: long enough for a
    training loop to write a checkpoint shard, short enough that a kill feels prompt."""


@dataclass
class KernelState:
    """Everything the kernel knows. Mutated only by kernel.handle (in place, for speed)."""

    config: KernelConfig = field(default_factory=KernelConfig)
    jobs: dict[str, Job] = field(default_factory=dict)
    tasks: dict[TaskKey, Task] = field(default_factory=dict)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    """client request id -> job id, so a retried submit returns the same job."""
    pending: dict[TaskKey, None] = field(default_factory=dict)
    """PENDING tasks in the order they became pending (a dict is an ordered set)."""
    by_worker: dict[str, set[str]] = field(default_factory=dict)
    """worker id -> ids of the attempts the controller wants running there."""
    job_attempts: dict[str, list[str]] = field(default_factory=dict)
    worker_changes: set[str] = field(default_factory=set, compare=False, repr=False)
    """Workers whose attempts changed (one came, went, or started running) since the fleet
    view last took this set (scheduler_view.FleetView, its one reader): the host rows to
    rebuild, without comparing every host on every pass."""
    deadlines: list[tuple[float, int, str, tuple]] = field(default_factory=list)
    """Heap of (when, seq, kind, key): task timeouts and scheduling timeouts. Entries are
    checked when they fire, so a stale one (the task moved on) is simply dropped."""
    _seq: int = 0

    def job_tasks(self, job_id: str) -> list[Task]:
        job = self.jobs[job_id]
        return [self.tasks[(job_id, i)] for i in range(job.spec.num_tasks)]

    def descendants(self, job_id: str) -> Iterator[Job]:
        """Every sub-job below `job_id`, parents before children."""
        stack = sorted(self.jobs[job_id].children, reverse=True)
        while stack:
            child = self.jobs.get(stack.pop())
            if child is not None:
                yield child
                stack.extend(sorted(child.children, reverse=True))

    def add_deadline(self, when: float, kind: str, key: tuple) -> None:
        self._seq += 1
        heapq.heappush(self.deadlines, (when, self._seq, kind, key))

    def pop_due(self, now: float) -> Iterator[tuple[str, tuple]]:
        while self.deadlines and self.deadlines[0][0] <= now:
            _, _, kind, key = heapq.heappop(self.deadlines)
            yield kind, key

    def set_task_state(self, task: Task, new: TaskState) -> None:
        """The one way a task changes state, so its job's counts stay right."""
        counts = self.jobs[task.job_id].counts
        counts[task.state] -= 1
        counts[new] = counts.get(new, 0) + 1
        task.state = new

    def set_pending(self, task: Task, now: float) -> None:
        self.set_task_state(task, TaskState.PENDING)
        task.pending_since = now
        self.pending[task.key] = None
        timeout = self.jobs[task.job_id].spec.scheduling_timeout_s
        if timeout is not None:
            self.add_deadline(now + timeout, "schedule", (task.job_id, task.index, now))

    def add_attempt(self, attempt: Attempt) -> None:
        self.attempts[attempt.attempt_id] = attempt
        self.job_attempts.setdefault(attempt.job_id, []).append(attempt.attempt_id)
        self.by_worker.setdefault(attempt.worker_id, set()).add(attempt.attempt_id)
        self.worker_changes.add(attempt.worker_id)

    def attempt_started(self, attempt: Attempt, now: float) -> None:
        """The attempt reached RUNNING at `now` (its host's row shows when)."""
        attempt.started_at = now
        self.worker_changes.add(attempt.worker_id)

    def release_attempt(self, attempt: Attempt) -> None:
        """The attempt no longer holds its worker."""
        held = self.by_worker.get(attempt.worker_id)
        if held is not None:
            held.discard(attempt.attempt_id)
            self.worker_changes.add(attempt.worker_id)
            if not held:
                del self.by_worker[attempt.worker_id]

    def add_job(self, job: Job) -> None:
        self.jobs[job.job_id] = job
        if job.spec.request_id:
            self.requests[job.spec.request_id] = job.job_id
        parent = self.jobs.get(job.spec.parent) if job.spec.parent else None
        if parent is not None:
            parent.children.add(job.job_id)

    def delete_job(self, job_id: str) -> None:
        """Forget a finished job and its records (its sub-jobs are left to their own fate)."""
        job = self.jobs.pop(job_id)
        if job.spec.request_id and self.requests.get(job.spec.request_id) == job_id:
            del self.requests[job.spec.request_id]
        parent = self.jobs.get(job.spec.parent) if job.spec.parent else None
        if parent is not None:
            parent.children.discard(job_id)
        for index in range(job.spec.num_tasks):
            self.tasks.pop((job_id, index), None)
            self.pending.pop((job_id, index), None)
        for attempt_id in self.job_attempts.pop(job_id, ()):
            attempt = self.attempts.pop(attempt_id)
            self.release_attempt(attempt)

    @classmethod
    def from_records(cls, jobs: Iterable[Job], tasks: Iterable[Task],
                     attempts: Iterable[Attempt], config: KernelConfig | None = None,
                     ) -> KernelState:
        """Rebuild the state and all its indexes from stored records."""
        state = cls(config=config or KernelConfig())
        for job in sorted(jobs, key=lambda j: j.job_id):   # parents sort before children
            job.children = set()
            state.add_job(job)
        for task in sorted(tasks, key=lambda t: (t.pending_since or 0.0, t.job_id, t.index)):
            state.tasks[task.key] = task
        for attempt in sorted(attempts, key=lambda a: (a.job_id, a.task_index, a.number)):
            state.attempts[attempt.attempt_id] = attempt
            state.job_attempts.setdefault(attempt.job_id, []).append(attempt.attempt_id)
        for job in state.jobs.values():
            job.counts = count_states(state.job_tasks(job.job_id))
        for task in state.tasks.values():
            state._reindex_task(task)
        return state

    def _reindex_task(self, task: Task) -> None:
        spec = self.jobs[task.job_id].spec
        if task.state is TaskState.PENDING:
            self.pending[task.key] = None
            if spec.scheduling_timeout_s is not None and task.pending_since is not None:
                self.add_deadline(task.pending_since + spec.scheduling_timeout_s, "schedule",
                                  (task.job_id, task.index, task.pending_since))
        attempt = self.attempts.get(task.attempt_id) if task.attempt_id else None
        if attempt is None or attempt.state not in ACTIVE_ATTEMPT:
            return
        self.by_worker.setdefault(attempt.worker_id, set()).add(attempt.attempt_id)
        self.worker_changes.add(attempt.worker_id)
        if attempt.state is TaskState.RUNNING and spec.timeout_s and attempt.started_at:
            self.add_deadline(attempt.started_at + spec.timeout_s, "timeout",
                              (attempt.attempt_id,))

    def summary(self) -> dict[str, int]:
        """Counts for a status page: jobs active/finished, tasks pending, attempts running."""
        finished = sum(1 for j in self.jobs.values() if j.state in TERMINAL_JOB)
        return {"jobs": len(self.jobs), "jobs_finished": finished,
                "tasks_pending": len(self.pending),
                "attempts_active": sum(len(s) for s in self.by_worker.values())}
