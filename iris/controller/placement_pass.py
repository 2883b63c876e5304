"""The placement pass's own state, a component of ControllerService (service.py): what the
pass is asked (each pending task's demand, or why it is not asked), the hosts as the
scheduler sees them (kept between passes), and what a pass leaves behind (why each job
waits, how long passes take). The service runs the pass itself (`_scheduled`: inputs from
here, `scheduling/scheduler.py` `schedule`, the gangs it asks for straight to the gangs
object); this component knows nothing of the gangs object but the gang ids it is given.
No sockets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping

from iris.base.clock import Clock
from iris.base.errors import InvalidRequestError
from iris.base.histogram import Histogram
from iris.base.ids import new_id
from iris.controller import colocate, queue_view, scheduler_view
from iris.controller.jobs import events as ev
from iris.controller.jobs.model import ACTIVE_ATTEMPT, TERMINAL_JOB
from iris.controller.jobs.spec import JobSpec
from iris.controller.jobs.state import KernelState
from iris.controller.regions import demand
from iris.controller.scheduling.fleet import Fleet
from iris.controller.scheduling.model import TaskDemand
from iris.controller.scheduling.reasons import PendingReason, ReasonCode
from iris.controller.scheduling.scheduler import SchedulePlan
from iris.controller.workers import WorkerInfo


class PlacementPass:
    """The placement pass's own state and its inputs (see the module docstring)."""

    def __init__(self, clock: Clock):
        self._clock = clock  # a pass's own duration is measured, not a decision
        self.pass_seconds = Histogram()
        # Why each job with pending tasks waits, as of the last pass (and gang outcomes),
        # without places in line: those are added when someone reads them (`reasons`).
        self.pending_reasons: dict[str, dict] = {}
        self._line: tuple = ((), ())  # (hosts, demoted) of the last pass, for `reasons`
        self._shown: dict[str, dict] | None = None  # `reasons` since the last change
        # The hosts as the scheduler sees them, kept between passes (scheduler_view.py).
        self.fleet_view = scheduler_view.FleetView()

    def inputs(self, state: KernelState, workers: Mapping[str, WorkerInfo],
               stopping: Mapping[str, Mapping], reserving: Collection[str],
               cooling: Mapping[str, dict], held: set[str]
               ) -> tuple[Fleet, list[TaskDemand], dict[str, int]] | None:
        """Begin a pass (the reasons of the last one are dropped): the fleet and what each
        pending task asks for, with the tasks counted as unplaced already (job -> tasks: a
        cooling gang's); None when nothing is pending. `reserving`: gangs in a reservation
        round, not asked again; `cooling`: gang -> why every region refused it, not asked
        again until its cooling ends; `held`: hosts nothing new goes to (gang holds, drains)."""
        self.pending_reasons, self._shown = {}, None
        if not state.pending:
            return None
        demands, unplaced = self._demands(state, workers, stopping, reserving, cooling)
        return self.fleet_view.fleet(state, workers, stopping, held=held), demands, unplaced

    @contextlib.contextmanager
    def measured(self) -> Iterator[None]:
        """Time the pass itself (its figures: the snapshot's `scheduling_passes`)."""
        started = self._clock.monotonic()
        yield
        self.pass_seconds.observe(self._clock.monotonic() - started)

    def outcome(self, plan: SchedulePlan, state: KernelState, fleet: Fleet,
                unplaced: dict[str, int], demoted: Mapping[str, str]
                ) -> tuple[list[ev.Event], list[tuple[JobSpec, int]]]:
        """What the pass decided as events (Assign, and Preempted for the lower-band
        attempts it evicts to make room), its reasons kept; with them, the work no region
        has room for (spec, tasks): the autoscalers' demand."""
        counted = dict(unplaced)
        for task, reason in plan.reasons.items():
            job_id = scheduler_view.parse_task_id(task)[0]
            self.pending_reasons.setdefault(job_id, reason.to_dict())
            if reason.code in (ReasonCode.NO_CAPACITY, ReasonCode.SCALING_UP):
                if state.jobs[job_id].spec.existing_capacity_only:
                    self.pending_reasons[job_id] = demand.hold_existing(reason.to_dict())
                    continue
                counted[job_id] = counted.get(job_id, 0) + 1
        self._line = (fleet.hosts, frozenset(demoted))
        return _plan_events(plan), [(state.jobs[j].spec, n) for j, n in counted.items()]

    def reasons(self, state: KernelState) -> dict[str, dict]:
        """Why each job waits, with places in line (queue_view.annotate). Computed when read
        (status, listings, the snapshot), at most once per pass or change: ranking every
        waiting job cost ~8% of the controller's thread when done on every pass, and the
        pass does not need it. The line is the kernel's as read now, the hosts as of the
        last pass (the one the reasons come from). Not to be mutated by the caller."""
        if self._shown is None:
            hosts, demoted = self._line
            self._shown = queue_view.annotate(self.pending_reasons, state, hosts, demoted)
        return self._shown

    def note_reason(self, job_id: str, reason: dict) -> None:
        """Why a job waits, learnt outside a pass (a gang round that did not fit)."""
        self.pending_reasons[job_id] = reason
        self._shown = None

    def forget(self, job_id: str) -> None:
        """The job finished: it waits for nothing."""
        if self.pending_reasons.pop(job_id, None) is not None:
            self._shown = None

    def _demands(self, state: KernelState, workers: Mapping[str, WorkerInfo],
                 stopping: Mapping[str, Mapping], reserving: Collection[str],
                 cooling: Mapping[str, dict]) -> tuple[list, dict[str, int]]:
        """What each pending task asks for; gangs every region refused wait out their
        cooling (counted as unplaced, job -> tasks: capacity must grow) without being asked
        again, and gangs being reserved are not asked again either (the scheduler only
        marked them: building and stepping their demands was a fifth of a pass under load)."""
        demands: list = []
        unplaced: dict[str, int] = {}
        waiting_stops = _still_stopping(state, stopping)
        placed: dict = {}
        for job_id, index in state.pending:
            job = state.jobs[job_id]
            # At most one attempt of a task at a time: a requeued task (evicted, preempted,
            # its gang restarted) waits until its previous attempt, still in its grace period
            # (on_preempt callbacks writing a checkpoint), has exited. A gang waits whole.
            waiting_on = index if job.spec.gang_size == 1 else None
            if (job_id, waiting_on) in waiting_stops or (job_id, index) in waiting_stops:
                self.pending_reasons.setdefault(job_id, {
                    "code": ReasonCode.PREVIOUS_ATTEMPT_STOPPING.value,
                    "message": f"task {index}: its previous attempt is still stopping (at "
                               "most one attempt of a task runs at a time)",
                    "details": {}})
                continue
            if job.spec.gang_size > 1:
                gang = scheduler_view.gang_id(job.spec, index)
                if gang in reserving:  # as the scheduler would mark it, without a step
                    self.pending_reasons.setdefault(job_id, _reserving(gang))
                    continue
                refused = cooling.get(gang)
                if refused is not None:
                    self.pending_reasons[job_id] = refused
                    unplaced[job_id] = unplaced.get(job_id, 0) + 1
                    continue
            extra = _colocation(state, workers, job.spec, placed) \
                if job.spec.colocate else ()
            if isinstance(extra, dict):
                self.pending_reasons[job_id] = extra
                continue
            try:
                demands += scheduler_view.task_demands(job.spec, job.submitted_at, (index,),
                                                       extra)
            except InvalidRequestError as exc:  # one bad job must not stop every pass
                self.pending_reasons[job_id] = {"code": "INVALID", "message": str(exc),
                                                "details": {}}
        return demands, unplaced


def _reserving(gang: str) -> dict:
    """Why the tasks of a gang in a reservation round wait (gang_placement's mark)."""
    return PendingReason(ReasonCode.WAITING_FOR_GANG, f"gang {gang} is being reserved",
                         {"gang": gang}).to_dict()


def _colocation(state: KernelState, workers: Mapping[str, WorkerInfo], spec: JobSpec,
                placed: dict) -> tuple | dict:
    """The constraint keeping a colocated job beside the job it follows, or the reason
    it waits (colocate.py); `placed` caches where each followed job is, for one pass."""
    key = (spec.colocate["scope"], spec.colocate["job"])
    if key not in placed:
        job = state.jobs.get(key[1])
        placed[key] = colocate.resolve(spec.colocate, _placed_in(state, workers, *key),
                                       ended=job is None or job.state in TERMINAL_JOB)
    where = placed[key]
    return where if isinstance(where, dict) else (where,)


def _placed_in(state: KernelState, workers: Mapping[str, WorkerInfo], scope: str,
               job_id: str) -> set[str]:
    """Zones (or regions) where the live attempts of `job_id` run."""
    job, found = state.jobs.get(job_id), set()
    for index in range(job.spec.num_tasks if job else 0):
        attempt = state.attempts.get(state.tasks[(job_id, index)].attempt_id or "")
        worker = workers.get(attempt.worker_id) if attempt is not None \
            and attempt.state in ACTIVE_ATTEMPT else None
        if worker is not None:
            found.add(worker.region if scope == "region" else
                      worker.attributes.get("zone", worker.region))
    return found


def _still_stopping(state: KernelState,
                    stopping: Mapping[str, Mapping]) -> set[tuple[str, int | None]]:
    """(job, task index) of every attempt told to stop that has not exited yet, and
    (job, None) for each job with one: a gang's tasks wait for all of its members."""
    out: set[tuple[str, int | None]] = set()
    for held in stopping.values():
        for attempt_id in held:
            attempt = state.attempts.get(attempt_id)
            if attempt is not None:
                out |= {(attempt.job_id, attempt.task_index), (attempt.job_id, None)}
    return out


def _plan_events(plan: SchedulePlan) -> list[ev.Event]:
    events: list[ev.Event] = []
    for a in plan.assignments:
        job_id, index = scheduler_view.parse_task_id(a.task_id)
        events.append(ev.Assign(new_id("ev-"), (
            ev.Placement(job_id, index, a.host_id, new_id("att-"), a.accelerator),)))
    for p in plan.preemptions:
        events.append(ev.Preempted(new_id("ev-"), p.attempt_id,
                                   f"preempted for {p.for_job} ({p.reason})"))
    return events
