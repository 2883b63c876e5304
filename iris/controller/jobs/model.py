"""The job records: Job -> tasks (one per replica host) -> attempts, their states, and how a job's
state follows from its tasks. Plain data (storable as dicts), no transitions: those are in kernel.

Records are mutable and owned by one KernelState; the kernel hands out copies in its effects.
Times are wall-clock seconds (they are persisted and must mean the same after a restart).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from iris.controller.jobs.spec import JobSpec

# The states are part of the protocol (clients, dashboards and workers read them): they are
# declared in the wire layer and re-exported here for the controller's own modules.
from iris.wire.states import (  # noqa: E402
    ACTIVE_ATTEMPT,
    FAILED_TASK,
    TERMINAL_JOB,
    TERMINAL_TASK,
    JobState,
    TaskState,
)

__all__ = ["ACTIVE_ATTEMPT", "FAILED_TASK", "TERMINAL_JOB", "TERMINAL_TASK", "Attempt", "Job",
           "JobState", "Task", "TaskState"]


@dataclass(slots=True)
class Attempt:
    """One try of one task on one worker. `attempt_id` is its fencing token."""

    attempt_id: str
    job_id: str
    task_index: int
    number: int                  # its job's first_attempt for the task's first, then +1, +2...
    worker_id: str
    state: TaskState = TaskState.ASSIGNED
    assigned_at: float = 0.0
    started_at: float | None = None   # when it reached RUNNING
    finished_at: float | None = None
    exit_code: int | None = None
    error: str = ""
    accelerator: str | None = None  # the TPU alternative chosen; None = the job's only one

    def to_dict(self) -> dict[str, Any]:
        # Every field is a scalar (str, int, float, None, a state): no deep copy needed
        # (dataclasses.asdict's was 15% of the controller's CPU per gang job, store writes).
        return {name: getattr(self, name) for name in _ATTEMPT_FIELDS}

    def __copy__(self) -> Attempt:  # copy.copy: a quarter of its generic slotted path's cost
        return Attempt(*[getattr(self, name) for name in _ATTEMPT_FIELDS])

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        return cls(**{**data, "state": TaskState(data["state"])})


@dataclass(slots=True)
class Task:
    """One replica host of a job. `attempt_id` is its latest attempt, if any; that attempt is
    the current one (the fence) only while it is ASSIGNED, BUILDING or RUNNING."""

    job_id: str
    index: int
    state: TaskState = TaskState.PENDING
    attempt_id: str | None = None
    attempts: int = 0            # how many attempts were ever made
    failures: int = 0            # spent from max_retries_failure
    preemptions: int = 0         # spent from max_retries_preemption (preempted or worker lost)
    pending_since: float | None = None
    finished_at: float | None = None
    error: str = ""
    has_result: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.job_id, self.index)

    def to_dict(self) -> dict[str, Any]:
        # Scalars only, as Attempt's.
        return {name: getattr(self, name) for name in _TASK_FIELDS}

    def __copy__(self) -> Task:
        return Task(*[getattr(self, name) for name in _TASK_FIELDS])

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        return cls(**{**data, "state": TaskState(data["state"])})


@dataclass(slots=True)
class Job:
    """A submitted job. Its `state` is kept equal to derive_job_state() by the kernel."""

    spec: JobSpec
    submitted_at: float
    state: JobState = JobState.PENDING
    killed: bool = False
    finished_at: float | None = None
    error: str = ""
    children: set[str] = field(default_factory=set)
    counts: dict[TaskState, int] = field(default_factory=dict)
    first_attempt: int = 0
    """The number of its tasks' first attempts: above every attempt number a replaced job of
    the same name (or a sub-job of it) used, because a worker's fence refuses a number it has
    seen for that task (a reused name once failed with "attempt 0 was already claimed")."""
    """How many of its tasks are in each state (kept by the kernel; derived, not stored)."""

    @property
    def job_id(self) -> str:
        return self.spec.name

    def to_dict(self) -> dict[str, Any]:
        """Everything but the spec and the children (stored apart / rebuilt from parents)."""
        return {"job_id": self.job_id, "submitted_at": self.submitted_at,
                "state": self.state.value, "killed": self.killed,
                "finished_at": self.finished_at, "error": self.error,
                "first_attempt": self.first_attempt}

    def __copy__(self) -> Job:  # shallow, as copy.copy's (children and counts shared)
        return Job(*[getattr(self, name) for name in _JOB_FIELDS])

    @classmethod
    def from_dict(cls, spec: JobSpec, data: dict[str, Any]) -> Job:
        return cls(spec=spec, submitted_at=data["submitted_at"], state=JobState(data["state"]),
                   killed=data["killed"], finished_at=data["finished_at"], error=data["error"],
                   first_attempt=data.get("first_attempt", 0))


_ATTEMPT_FIELDS = tuple(f.name for f in fields(Attempt))
_TASK_FIELDS = tuple(f.name for f in fields(Task))
_JOB_FIELDS = tuple(f.name for f in fields(Job))


def count_states(tasks: list[Task]) -> dict[TaskState, int]:
    counts: dict[TaskState, int] = {}
    for task in tasks:
        counts[task.state] = counts.get(task.state, 0) + 1
    return counts


def derive_job_state(job: Job, counts: dict[TaskState, int]) -> JobState:
    """A job's state from how many of its tasks are in each state (and whether it was killed).
    O(1) in the number of tasks, so a 4,096-task job costs no more per event than a small one.

    Failed tasks beyond max_task_failures fail the job (WORKER_FAILED if none of them failed
    through the user's code, only by preemption or machine loss); an unschedulable task makes the job
    UNSCHEDULABLE; a kill makes it KILLED; when every task has ended within the failure
    allowance it SUCCEEDED; otherwise it is RUNNING if any task runs, BUILDING if any is
    placed, else PENDING.
    """
    states = {s for s, n in counts.items() if n}
    failed = sum(counts.get(s, 0) for s in FAILED_TASK)
    if failed > job.spec.max_task_failures:
        return JobState.FAILED if counts.get(TaskState.FAILED) else JobState.WORKER_FAILED
    if TaskState.UNSCHEDULABLE in states:
        return JobState.UNSCHEDULABLE
    if job.killed:
        return JobState.KILLED
    if states <= TERMINAL_TASK:
        return JobState.SUCCEEDED
    if TaskState.RUNNING in states:
        return JobState.RUNNING
    if states & {TaskState.ASSIGNED, TaskState.BUILDING}:
        return JobState.BUILDING
    return JobState.PENDING
