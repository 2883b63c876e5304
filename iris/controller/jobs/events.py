"""The job kernel's vocabulary: events in (each with an `event_id` that is logged) and effects
out. Plain frozen dataclasses; no behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

from iris.controller.jobs.model import Attempt, Job, JobState, Task
from iris.controller.jobs.spec import JobSpec

# ----------------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Submit:
    event_id: str
    spec: JobSpec


@dataclass(frozen=True)
class Placement:
    job_id: str
    task_index: int
    worker_id: str
    attempt_id: str
    accelerator: str | None = None  # the TPU alternative it runs on (jobs with fallbacks)


@dataclass(frozen=True)
class Assign:
    """Place tasks on workers, all or none. A multi-host job's tasks are placed by whole gangs:
    every task of a gang in the same event, never part of one."""

    event_id: str
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class AttemptBuilding:
    event_id: str
    attempt_id: str


@dataclass(frozen=True)
class AttemptRunning:
    event_id: str
    attempt_id: str


@dataclass(frozen=True)
class AttemptExited:
    """The attempt's process ended. exit_code 0 is success; `result` is a callable's pickled
    return value (stored, not kept in memory)."""

    event_id: str
    attempt_id: str
    exit_code: int
    error: str = ""
    result: bytes | None = None


@dataclass(frozen=True)
class Preempted:
    event_id: str
    attempt_id: str
    reason: str = "preempted"
    grace_s: float | None = None  # the stop's grace; None: the kernel's stop_grace_s


@dataclass(frozen=True)
class WorkerLost:
    event_id: str
    worker_id: str
    reason: str = "worker lost"


@dataclass(frozen=True)
class Kill:
    """Kill a job and all its sub-jobs (a sub-job never outlives its parent, so there is no
    non-cascading kill)."""

    event_id: str
    job_id: str
    reason: str = "killed by user"


@dataclass(frozen=True)
class Tick:
    """Time passed: fire task timeouts and scheduling timeouts due at `now`."""

    event_id: str


@dataclass(frozen=True)
class Reconcile:
    """A worker (re)registered and reports the attempts it is running."""

    event_id: str
    worker_id: str
    running: tuple[str, ...]


@dataclass(frozen=True)
class Prune:
    """Forget finished jobs whose `finished_at` is older than `now - retention_s`."""

    event_id: str
    retention_s: float


Event = (Submit | Assign | AttemptBuilding | AttemptRunning | AttemptExited | Preempted
         | WorkerLost | Kill | Tick | Reconcile | Prune)

# ---------------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class Accepted:
    """The submit's answer: the job id, and whether an earlier identical request made it."""

    job_id: str
    duplicate: bool


@dataclass(frozen=True)
class StartAttempt:
    worker_id: str
    attempt_id: str
    job_id: str
    task_index: int
    num_tasks: int
    gang_size: int


@dataclass(frozen=True)
class StopAttempt:
    """Stop an attempt's process: SIGTERM, then SIGKILL after `grace_s` seconds."""

    worker_id: str
    attempt_id: str
    grace_s: float
    reason: str


@dataclass(frozen=True)
class JobFinished:
    job_id: str
    state: JobState
    error: str


@dataclass(frozen=True)
class Ignored:
    """The event changed nothing, e.g. it was about an attempt that is no longer current."""

    event_id: str
    reason: str


@dataclass(frozen=True)
class Persist:
    """Rows to commit, in one transaction, before any other effect is acted on or answered.

    Records are copies taken when the event was handled. `deleted_jobs` go with their tasks,
    attempts, results and request ids.
    """

    event_id: str
    kind: str
    at: float
    jobs: tuple[Job, ...] = ()
    tasks: tuple[Task, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    results: tuple[tuple[str, int, bytes], ...] = ()
    deleted_jobs: tuple[str, ...] = ()


Effect = Accepted | StartAttempt | StopAttempt | JobFinished | Ignored | Persist
