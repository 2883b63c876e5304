"""The simulated work: jobs, tasks, attempts and the accounting of what they achieved.

Not placement (the real scheduler decides that, see cluster.py). A task's work is
`duration_s` of running; an attempt that is stopped keeps the work up to its last
checkpoint and wastes the rest. Every chip-second is booked exactly once: useful (done
and kept, or checkpointed), or wasted (lost since the last checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench._daytrace.trace import Job
from iris.base.resources import Resources
from iris.controller.jobs.spec import Entrypoint, JobSpec
from iris.controller.scheduling.model import Band, Demand, TaskDemand, per_host_demand

_ENTRY = Entrypoint("command", payload=b"", argv=("train",))


@dataclass
class Task:
    job: JobRun
    index: int
    demand: TaskDemand
    remaining_s: float
    host: str | None = None
    attempt: str | None = None
    started_at: float = 0.0
    done: bool = False


@dataclass
class JobRun:
    job: Job
    band: Band
    resources: Resources
    need: Demand
    chips: int  # per task
    gang_size: int
    spec: JobSpec
    tasks: list[Task] = field(default_factory=list)
    first_start: float | None = None
    finished_at: float | None = None

    @property
    def is_gang(self) -> bool:
        return self.gang_size > 1

    def gang_id(self, index: int) -> str | None:
        return f"{self.job.id}/g{index // self.gang_size}" if self.is_gang else None


def make_job(job: Job) -> JobRun:
    res = job.resources
    band = Band.parse(job.band)
    gang = res.gang_size
    spec = JobSpec(name=f"/{job.user}/{job.id}", entrypoint=_ENTRY, user=job.user,
                   resources=res, replicas=job.replicas, priority=band.name.lower())
    run = JobRun(job, band, res, per_host_demand(res), job.chips_per_task, gang, spec)
    for i in range(job.replicas * gang):
        gid = run.gang_id(i)
        demand = TaskDemand(f"{job.id}/{i}", job.id, job.user, band, res, (), gid,
                            gang if gid else 1, job.t)
        run.tasks.append(Task(run, i, demand, float(job.duration_s)))
    return run


@dataclass
class Ledger:
    """Chip-seconds booked, per band, and the events behind them."""

    useful: dict[str, float] = field(default_factory=dict)
    wasted: float = 0.0
    preemptions: int = 0  # attempts stopped before their work was done
    evictions: int = 0  # of which the scheduler stopped for a higher band
    starts: int = 0
    # wasted chip-seconds by cause: "evicted" (for a higher band), "drop" (a capacity drop
    # in the trace took the slice), "reclaimed" (random preemption, or the slice deleted)
    wasted_by: dict[str, float] = field(default_factory=dict)

    def keep(self, band: Band, chip_s: float) -> None:
        key = band.name.lower()
        self.useful[key] = self.useful.get(key, 0.0) + chip_s

    def start(self, task: Task, host: str, attempt: str, now: float) -> None:
        task.host, task.attempt, task.started_at = host, attempt, now
        self.starts += 1
        if task.job.first_start is None:
            task.job.first_start = now

    def finish(self, task: Task, now: float) -> None:
        """The attempt ran to the end of its work (at `now` or before: never beyond)."""
        self.keep(task.job.band, task.remaining_s * task.job.chips)
        task.remaining_s = 0.0
        task.host = task.attempt = None
        task.done = True

    def stop(self, task: Task, now: float, evicted: bool, cause: str = "") -> None:
        """Stopped early: keep the work up to the last checkpoint, waste the rest."""
        ran = max(0.0, now - task.started_at)
        ckpt = task.job.job.checkpoint_s
        kept = min(task.remaining_s, (ran // ckpt) * ckpt)
        self.keep(task.job.band, kept * task.job.chips)
        self.wasted += (ran - kept) * task.job.chips
        cause = "evicted" if evicted else cause or "reclaimed"
        self.wasted_by[cause] = self.wasted_by.get(cause, 0.0) + (ran - kept) * task.job.chips
        task.remaining_s -= kept
        task.host = task.attempt = None
        self.preemptions += 1
        self.evictions += evicted

    def horizon(self, task: Task, now: float) -> None:
        """The day ends with the attempt running: its progress counts (it goes on)."""
        self.keep(task.job.band, min(task.remaining_s, now - task.started_at) * task.job.chips)
