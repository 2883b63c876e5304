"""The figures feed: the live figures (live_figures.py) fed from the controller, what a
committed turn did and a sample of the fleet every SAMPLE_EVERY_S. A component of
ControllerService (service.py) that owns the figures; the kernel's state and `now` are passed in.

The derivations are pure functions of the job kernel's records (`figure_events`,
`fleet_sample`), so kernel tests can drive them; the feed only calls them at the two places
the controller learns something: after a commit, and on its tick.
"""

from __future__ import annotations

from collections.abc import Iterable

from iris.controller import live_figures as lf
from iris.controller.jobs import events as ev
from iris.controller.jobs.model import TaskState
from iris.controller.jobs.state import KernelState
from iris.controller.scheduling.model import per_host_demand
from iris.controller.workers import WorkerInfo


class FiguresFeed:
    def __init__(self) -> None:
        self.figures = lf.FiguresState()

    def observe(self, effects: Iterable, state: KernelState, now: float) -> None:
        """After a commit: queue times of new attempts, work lost by ended ones."""
        for persist in effects:
            if isinstance(persist, ev.Persist):
                for event in figure_events(persist, state):
                    lf.handle(self.figures, event, now)

    def tick(self, state: KernelState, workers: Iterable[WorkerInfo], now: float) -> None:
        """On the tick: a sample of the fleet when one is due."""
        if lf.due(self.figures, now):
            lf.handle(self.figures, fleet_sample(state, workers), now)


def figure_events(persist: ev.Persist, state: KernelState) -> list:
    """Queued / WorkLost events for one committed Persist (its records are the changed ones).

    An attempt copy still ASSIGNED is new: it waited since its job was submitted (number 0)
    or since its task's previous attempt ended. An attempt copy that has just ended
    (finished_at == the Persist's time) PREEMPTED or WORKER_FAILED lost its run; one KILLED
    while its task went back to PENDING was a gang member restarted with its gang."""
    out: list = []
    requeued = {(t.job_id, t.index) for t in persist.tasks if t.state is TaskState.PENDING}
    ends: dict[str, dict[tuple[int, int], float | None]] = {}  # job -> (task, number) -> end
    for attempt in persist.attempts:
        job = state.jobs.get(attempt.job_id)
        if job is None:
            continue
        spec = job.spec
        if attempt.state is TaskState.ASSIGNED and attempt.assigned_at == persist.at:
            if attempt.number == 0:
                since = job.submitted_at
            else:
                if attempt.job_id not in ends:  # once per job and Persist: a restarted
                    ends[attempt.job_id] = _ends(state, attempt.job_id)  # gang is O(tasks)
                since = ends[attempt.job_id].get((attempt.task_index, attempt.number - 1))
            if since is not None:
                out.append(lf.Queued(spec.priority, attempt.assigned_at - since))
            continue
        if attempt.finished_at != persist.at or attempt.started_at is None:
            continue
        cause = {TaskState.PREEMPTED: "evicted", TaskState.WORKER_FAILED: "machine_lost"}.get(
            attempt.state)
        if cause is None and attempt.state is TaskState.KILLED \
                and (attempt.job_id, attempt.task_index) in requeued:
            cause = "gang_restart"
        if cause is not None:
            out.append(lf.WorkLost(cause, per_host_demand(spec.resources).chips,
                                   attempt.finished_at - attempt.started_at))
    return out


def _ends(state: KernelState, job_id: str) -> dict[tuple[int, int], float | None]:
    """(task index, attempt number) -> when that attempt ended, for every attempt of a job."""
    out = {}
    for attempt_id in state.job_attempts.get(job_id, ()):
        a = state.attempts.get(attempt_id)
        if a is not None:
            out[(a.task_index, a.number)] = a.finished_at
    return out


def fleet_sample(state: KernelState, workers: Iterable[WorkerInfo]) -> lf.Sample:
    """Every worker's units and use, and which gang types wait (for fragmentation)."""
    hosts = []
    for w in workers:
        held = state.by_worker.get(w.worker_id, ())
        accelerator = w.attributes.get("accelerator_type") or None
        units = float(w.accelerators) if accelerator else float(w.cpu)
        busy = 0.0
        for attempt_id in held:
            spec = state.jobs[state.attempts[attempt_id].job_id].spec
            need = per_host_demand(spec.resources)
            busy += need.chips if accelerator else need.cpu
        hosts.append(lf.HostSample(accelerator or "cpu", w.region,
                                   w.attributes.get("slice_id") or w.worker_id, units, busy,
                                   not held))
    return lf.Sample(tuple(hosts), waiting_gang_types(state))


def waiting_gang_types(state: KernelState) -> frozenset[str]:
    wanted: set[str] = set()
    seen: set[str] = set()
    for job_id, _ in state.pending:
        if job_id in seen:
            continue
        seen.add(job_id)
        spec = state.jobs[job_id].spec
        if spec.gang_size > 1 and spec.resources.accelerator:
            wanted.add(spec.resources.accelerator)
    return frozenset(wanted)

