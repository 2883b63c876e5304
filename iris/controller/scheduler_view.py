"""The scheduler's view of the live cluster: HostView / TaskDemand from controller state. Pure.

Not the scheduler (scheduling/) nor placement policy. Builds what `scheduling.schedule`
and `scheduling.dry_run` take from the worker table and the kernel's records, so one pass
sees exactly what the controller has promised on each worker.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from iris.base.resources import Resources
from iris.controller.jobs.model import ACTIVE_ATTEMPT
from iris.controller.jobs.spec import JobSpec
from iris.controller.jobs.state import KernelState
from iris.controller.scheduling.constraints import Constraint, parse_constraints
from iris.controller.scheduling.fleet import Fleet
from iris.controller.scheduling.model import (
    Band,
    Demand,
    HostView,
    RunningAttempt,
    TaskDemand,
    per_host_demand,
)
from iris.controller.workers import WorkerInfo


def host_views(state: KernelState, workers: Iterable[WorkerInfo],
               stopping: dict[str, dict[str, Resources]] | None = None,
               held: Collection[str] = ()) -> list[HostView]:
    """Workers as hosts; attempts still stopping count as terminating (they hold the room
    until they exit, and are never chosen for eviction again). `held`: hosts set aside for
    gang reservations in flight, which nothing else may take."""
    stopping = stopping or {}
    return [host_row(state, w, stopping.get(w.worker_id), w.worker_id in held)
            for w in workers]


def host_row(state: KernelState, w: WorkerInfo, stopping: dict[str, Resources] | None,
             held: bool) -> HostView:
    """One worker as a host (see host_views)."""
    attrs = w.attributes
    accelerator = attrs.get("accelerator_type") or None
    return HostView(
        w.worker_id, w.region, attrs.get("zone", w.region),
        Demand(w.cpu, w.memory_bytes, w.accelerators),
        scale_group=attrs.get("scale_group", ""), slice_id=attrs.get("slice_id"),
        accelerator=accelerator,
        accelerator_variant=_tpu_family(accelerator),
        preemptible=attrs.get("preemptible", "false").lower() == "true",
        running=running_on(state, w.worker_id, stopping), attributes=dict(attrs), held=held)


def running_on(state: KernelState, worker_id: str,
               stopping: dict[str, Resources] | None) -> tuple[RunningAttempt, ...]:
    """What a host's row says runs there: what it is stopping, then the kernel's attempts."""
    running = [RunningAttempt(a, "", "", "", Band.BATCH, per_host_demand(res),
                              terminating=True)
               for a, res in sorted((stopping or {}).items())]
    for attempt_id in sorted(state.by_worker.get(worker_id, ())):
        attempt = state.attempts[attempt_id]
        spec = state.jobs[attempt.job_id].spec
        running.append(RunningAttempt(
            attempt_id, task_id(attempt.job_id, attempt.task_index), attempt.job_id,
            spec.user, Band.parse(spec.priority),
            per_host_demand(attempt_resources(spec, attempt.accelerator)),
            gang_id(spec, attempt.task_index), started_at=attempt.started_at,
            checkpoint_every=spec.checkpoint_every_s))
    return tuple(running)


class FleetView:
    """The fleet kept between scheduling passes: a host's row is rebuilt only when what it is
    made of changed, and only those rows are looked at. What changed since the last pass is
    told, not searched for: the kernel's `worker_changes` (attempts that came, went or
    started there), registrations (a WorkerInfo replaced), stops (compared for the few hosts
    stopping something) and holds (the difference of two sets; a hold set or cleared only
    flips the row's flag, without building it again).

    Before, a pass rebuilt every row and then the scheduler's Fleet: 25 ms at 2,000 hosts,
    100 ms at 5,000, once per submit; then it compared a key per host on every pass and
    rebuilt a gang's rows twice per job (hold set, then hold cleared with its attempt).
    A host gone (the order of the rest changes), another KernelState (reloaded) or a
    re-registration with other attributes rebuilds it all.
    `fleet(...)` always equals `Fleet(host_views(...))` of the same inputs.
    """

    def __init__(self) -> None:
        self._state: KernelState | None = None
        self._ids: list[str] = []
        self._values: list[WorkerInfo] = []
        self._rows: dict[str, int] = {}  # worker id -> its row
        self._held: frozenset[str] = frozenset()
        self._stopping: dict[str, tuple] = {}  # hosts stopping something -> what
        self._fleet: Fleet | None = None
        self.rebuilds = 0  # full rebuilds, for tests and the fleet benchmark
        self.updated = 0  # rows rebuilt one by one
        self.flipped = 0  # holds set or cleared without a rebuild

    def fleet(self, state: KernelState, workers: Mapping[str, WorkerInfo],
              stopping: Mapping[str, dict[str, Resources]],
              held: Collection[str] = ()) -> Fleet:
        held = frozenset(held)
        changed, state.worker_changes = state.worker_changes, set()
        values = list(workers.values())
        fleet = self._fleet
        if fleet is None or state is not self._state:
            return self._rebuild(state, workers, stopping, held, values)
        n = len(self._values)
        registered: set[str] = set()
        if values != self._values:  # identity first: C speed when no one re-registered
            ids = list(workers)
            if ids[:n] != self._ids:
                return self._rebuild(state, workers, stopping, held, values)
            old = self._values
            registered.update(ids[i] for i in range(n) if values[i] is not old[i])
            for wid in ids[n:]:
                self._rows[wid] = len(fleet.hosts)
                fleet.append(host_row(state, workers[wid], stopping.get(wid), wid in held))
            self._ids, self._values = ids, values
        stops = {wid: tuple(sorted(s.items())) for wid, s in stopping.items() if s}
        if stops != self._stopping:
            changed.update(w for w in stops.keys() | self._stopping.keys()
                           if stops.get(w) != self._stopping.get(w))
        flips = held ^ self._held
        self._held, self._stopping = held, stops
        rows = self._rows
        for wid in registered:  # a new registration: the whole row again
            row = host_row(state, workers[wid], stopping.get(wid), wid in held)
            if not fleet.update(rows[wid], row):  # with other attributes
                return self._rebuild(state, workers, stopping, held, values)
            self.updated += 1
        changed.difference_update(registered)
        for wid in changed:  # what runs there: the row's registration part is kept
            i = rows.get(wid)
            if i is None or i >= n:  # not registered, or appended just now
                continue
            fleet.set_running(i, running_on(state, wid, stopping.get(wid)), wid in held)
            self.updated += 1
        changed |= registered
        for wid in flips.difference(changed):
            i = rows.get(wid)
            if i is not None and i < n:
                fleet.set_held(i, wid in held)
                self.flipped += 1
        return fleet

    def _rebuild(self, state: KernelState, workers: Mapping[str, WorkerInfo],
                 stopping: Mapping[str, dict[str, Resources]], held: frozenset[str],
                 values: list[WorkerInfo]) -> Fleet:
        self.rebuilds += 1
        self._fleet = Fleet(host_views(state, values, dict(stopping), held))
        self._state, self._ids, self._values = state, list(workers), values
        self._rows = {wid: i for i, wid in enumerate(self._ids)}
        self._held = held
        self._stopping = {wid: tuple(sorted(s.items())) for wid, s in stopping.items() if s}
        return self._fleet


def _tpu_family(accelerator: str | None) -> str | None:
    """"v5litepod-16" -> "v5litepod"; None for a GPU ("H100"), whose hosts are a GPU pool:
    taking "H100" for a TPU family put GPU hosts in a TPU pool no GPU task looks in."""
    if not accelerator or "-" not in accelerator:
        return None
    return accelerator.rsplit("-", 1)[0]


def task_demands(spec: JobSpec, submitted_at: float,
                 indices: Iterable[int] | None = None,
                 extra: tuple[Constraint, ...] = ()) -> list[TaskDemand]:
    """Tasks of a job (all of them, or `indices`) as the scheduler's pending work; `extra`:
    constraints settled at placement (colocation)."""
    constraints = parse_constraints(spec.constraints) + extra
    band = Band.parse(spec.priority)
    wanted = range(spec.num_tasks) if indices is None else indices
    return [TaskDemand(task_id(spec.name, i), spec.name, spec.user, band, spec.resources,
                       constraints, gang_id(spec, i), spec.gang_size, submitted_at)
            for i in wanted]


def attempt_resources(spec: JobSpec, accelerator: str | None) -> Resources:
    """What an attempt of `spec` placed on `accelerator` uses: with fallbacks, that
    alternative alone (so the worker admits it and it is charged its own chips)."""
    if accelerator and accelerator in spec.resources.tpu_alternatives:
        return spec.resources.choose(accelerator)
    return spec.resources


def chosen_accelerator(spec: JobSpec, worker: WorkerInfo | None) -> str | None:
    """The alternative a placement of `spec` on `worker` takes (None: no fallbacks)."""
    if not spec.resources.has_fallbacks or worker is None:
        return None
    return spec.resources.alternative_on(worker.attributes.get("accelerator_type")).tpu


def task_id(job_id: str, index: int) -> str:
    return f"{job_id}[{index}]"


def parse_task_id(value: str) -> tuple[str, int]:
    job_id, _, rest = value.rpartition("[")
    return job_id, int(rest.rstrip("]"))


def gang_id(spec: JobSpec, task_index: int) -> str | None:
    if spec.gang_size <= 1:
        return None
    return f"{spec.name}#g{task_index // spec.gang_size}"


def runs_on(state: KernelState, job_id: str, index: int, hosts: tuple[str, ...]) -> bool:
    """The task runs (an active attempt) on one of `hosts`."""
    task = state.tasks.get((job_id, index))
    attempt = state.attempts.get(task.attempt_id or "") if task else None
    return attempt is not None and attempt.state in ACTIVE_ATTEMPT and attempt.worker_id in hosts


def gang_misfit(job_id: str, indices: tuple[int, ...], hosts: tuple[str, ...],
                state: KernelState, workers: Mapping[str, WorkerInfo],
                stopping: dict[str, dict[str, Resources]]) -> str | None:
    """Why a gang's tasks cannot start on the hosts a region placed it on now (None: they
    can): the regions' view lags the controller's by a message."""
    if len(hosts) != len(indices):
        return f"{len(hosts)} hosts for {len(indices)} tasks"
    if not all((job_id, i) in state.pending for i in indices):
        return "its tasks are no longer all pending"
    need = per_host_demand(state.jobs[job_id].spec.resources)
    for h in hosts:
        worker = workers.get(h)
        if worker is None:
            return f"host {h} is not registered"
        used = [state.jobs[state.attempts[a].job_id].spec.resources
                for a in state.by_worker.get(h, ())] + list(stopping.get(h, {}).values())
        cpu = worker.cpu - sum(r.cpu for r in used)
        memory = worker.memory_bytes - sum(r.memory_bytes for r in used)
        chips = worker.accelerators - sum(per_host_demand(r).chips for r in used)
        if cpu < need.cpu - 1e-9 or memory < need.memory or chips < need.chips:
            return f"host {h} is busy"
    return None
