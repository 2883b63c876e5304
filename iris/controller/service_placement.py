"""Time and placement, on the controller's turn: the tick (lost workers, restart grace), the global
scheduling pass and the push of region inventories. Part of ControllerService (service.py).
"""

from __future__ import annotations

import logging

from iris.base.errors import InvalidRequestError, StorageError
from iris.base.ids import new_id
from iris.controller import colocate, queue_view, scheduler_view
from iris.controller.jobs import event_log
from iris.controller.jobs import events as ev
from iris.controller.jobs.model import ACTIVE_ATTEMPT, TERMINAL_JOB
from iris.controller.regions import demand
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import SchedulerConfig, schedule
from iris.controller.turns import now_mono, now_wall, turn

_log = logging.getLogger(__name__)
# Region inventories are pushed at most this often (and before any gang round)...
SYNC_EVERY_S = 0.2
# ...and no more often than every SYNC_S_PER_HOST x hosts: a push walks every host here, is
# encoded, then checked whole by the Region actor, ~20 us a host in all (200 ms at 10,000
# hosts on this 2-core machine, bench.fleet under py-spy), so every 0.2 s it took more than
# the controller had. 20x that keeps pushes under 5 % of a core: every 4 s at 10,000 hosts.
SYNC_S_PER_HOST = 20 * 20e-6


class Placement:
    @turn
    def tick(self) -> None:
        now = now_mono(self)
        events: list[ev.Event] = [ev.Tick(new_id("ev-"))]
        lost = self.workers.lost(now)
        events += [ev.WorkerLost(new_id("ev-"), w, "no heartbeat") for w in lost]
        for worker_id in lost:  # its processes are gone with it
            self._forget_stops(worker_id)
            self.draining.pop(worker_id, None)
        self._placement_due = self._placement_due or bool(lost)
        if self._unclaimed and now - self._started > self.config.restart_grace_s:
            events += [ev.WorkerLost(new_id("ev-"), w, "did not come back after a controller "
                                     "restart") for w in sorted(self._unclaimed)]
            for worker_id in self._unclaimed:  # nor did what it was stopping
                self._forget_stops(worker_id)
            self._unclaimed.clear()
        self._run_many(events, schedule=True)
        self._figures_tick(now_wall(self))
        self._sync_regions()  # what changed since the last push, at most every SYNC_EVERY_S

    def _sync_regions(self, force: bool = False) -> None:
        """Push each region its inventory. Walking every worker costs O(fleet), so this runs
        at most every SYNC_EVERY_S, or SYNC_S_PER_HOST per host (a burst of 10,000
        registrations once made it O(N^2)), and at once before a gang round that relies on
        it."""
        now = now_mono(self)
        every = max(SYNC_EVERY_S, SYNC_S_PER_HOST * len(self.workers.workers))
        if self._inventory_dirty and (force or now - self._synced_at >= every):
            self._inventory_dirty, self._synced_at = False, now
            self.gangs.sync_regions(self.state, self.workers.workers.values(), self.stopping,
                                    self.unmet, self.region_groups, self.draining)

    @turn
    def prune(self) -> None:
        self._run(ev.Prune(new_id("ev-"), self.config.retention_s))
        if self.store.logged_count() > event_log.FOLD_AFTER_ROWS:
            try:  # housekeeping: a failed fold rolls back and is tried again next prune
                self.store.compact_event_log(now_wall(self))
            except StorageError as exc:
                _log.warning("folding the event log failed: %s", exc)

    def _scheduled(self) -> list[ev.Event]:
        """The global scheduler's pass over every pending task: Assign events, Preempted
        events for lower-band attempts it evicts to make room, and gang requests, which the
        tracker turns into reservation rounds through the Region actors. Work no region has
        room for becomes the autoscalers' demand (self.unmet)."""
        self.pending_reasons = {}
        self.unmet = {}
        if not self.state.pending:
            return []
        unplaced: dict[str, int] = {}
        demands = self._demands(unplaced)
        demoted = self.over_budget()
        started = self.clock.monotonic()  # a measured duration, not a decision
        fleet = self.fleet_view.fleet(self.state, self.workers.workers, self.stopping,
                                      held=self.gangs.held_hosts() | set(self.draining))
        plan = schedule(fleet, demands, reserving_gangs=set(self.gangs.reserving),
                        scaling_up=demand.scaling_up(self.region_reports),
                        config=SchedulerConfig(demoted=demoted),
                        now=now_wall(self))  # the clock of the attempts' started_at
        self.pass_seconds.observe(self.clock.monotonic() - started)
        for request in plan.gang_requests:
            self.gangs.request(request)
        for task, reason in plan.reasons.items():
            job_id = scheduler_view.parse_task_id(task)[0]
            self.pending_reasons.setdefault(job_id, reason.to_dict())
            if reason.code in (ReasonCode.NO_CAPACITY, ReasonCode.SCALING_UP):
                if self.state.jobs[job_id].spec.existing_capacity_only:
                    self.pending_reasons[job_id] = demand.hold_existing(reason.to_dict())
                    continue
                unplaced[job_id] = unplaced.get(job_id, 0) + 1
        self.pending_reasons = queue_view.annotate(self.pending_reasons, self.state,
                                                   fleet.hosts, demoted)
        if self.region_groups and unplaced:
            self.unmet = demand.plan_growth(
                [(self.state.jobs[j].spec, n) for j, n in unplaced.items()],
                self.region_groups, self.region_reports, self.pending_reasons)
        return _plan_events(plan)

    def _colocation(self, spec, placed: dict) -> tuple | dict:
        """The constraint keeping a colocated job beside the job it follows, or the reason
        it waits (colocate.py); `placed` caches where each followed job is, for one pass."""
        key = (spec.colocate["scope"], spec.colocate["job"])
        if key not in placed:
            job = self.state.jobs.get(key[1])
            placed[key] = colocate.resolve(spec.colocate, self._placed_in(*key),
                                           ended=job is None or job.state in TERMINAL_JOB)
        where = placed[key]
        return where if isinstance(where, dict) else (where,)

    def _placed_in(self, scope: str, job_id: str) -> set[str]:
        """Zones (or regions) where the live attempts of `job_id` run."""
        job, found = self.state.jobs.get(job_id), set()
        for index in range(job.spec.num_tasks if job else 0):
            attempt = self.state.attempts.get(self.state.tasks[(job_id, index)].attempt_id
                                              or "")
            worker = self.workers.workers.get(attempt.worker_id) if attempt is not None \
                and attempt.state in ACTIVE_ATTEMPT else None
            if worker is not None:
                found.add(worker.region if scope == "region" else
                          worker.attributes.get("zone", worker.region))
        return found

    def _still_stopping(self) -> set[tuple[str, int | None]]:
        """(job, task index) of every attempt told to stop that has not exited yet, and
        (job, None) for each job with one: a gang's tasks wait for all of its members."""
        out: set[tuple[str, int | None]] = set()
        for held in self.stopping.values():
            for attempt_id in held:
                attempt = self.state.attempts.get(attempt_id)
                if attempt is not None:
                    out |= {(attempt.job_id, attempt.task_index), (attempt.job_id, None)}
        return out

    def _demands(self, unplaced: dict[str, int]) -> list:
        """What each pending task asks for; gangs every region refused wait out their
        cooling (counted in `unplaced`: capacity must grow) without being asked again."""
        demands = []
        now = now_mono(self)
        stopping = self._still_stopping()
        placed: dict = {}
        for job_id, index in self.state.pending:
            job = self.state.jobs[job_id]
            # At most one attempt of a task at a time: a requeued task (evicted, preempted,
            # its gang restarted) waits until its previous attempt, still in its grace period
            # (on_preempt callbacks writing a checkpoint), has exited. A gang waits whole.
            waiting_on = index if job.spec.gang_size == 1 else None
            if (job_id, waiting_on) in stopping or (job_id, index) in stopping:
                self.pending_reasons.setdefault(job_id, {
                    "code": ReasonCode.PREVIOUS_ATTEMPT_STOPPING.value,
                    "message": f"task {index}: its previous attempt is still stopping (at "
                               "most one attempt of a task runs at a time)",
                    "details": {}})
                continue
            if job.spec.gang_size > 1:
                cooling = self.gangs.waiting(scheduler_view.gang_id(job.spec, index), now)
                if cooling is not None:
                    self.pending_reasons[job_id] = cooling
                    unplaced[job_id] = unplaced.get(job_id, 0) + 1
                    continue
            extra = self._colocation(job.spec, placed) if job.spec.colocate else ()
            if isinstance(extra, dict):
                self.pending_reasons[job_id] = extra
                continue
            try:
                demands += scheduler_view.task_demands(job.spec, job.submitted_at, (index,),
                                                       extra)
            except InvalidRequestError as exc:  # one bad job must not stop every pass
                self.pending_reasons[job_id] = {"code": "INVALID", "message": str(exc),
                                                "details": {}}
        return demands


def _plan_events(plan) -> list[ev.Event]:
    events: list[ev.Event] = []
    for a in plan.assignments:
        job_id, index = scheduler_view.parse_task_id(a.task_id)
        events.append(ev.Assign(new_id("ev-"), (
            ev.Placement(job_id, index, a.host_id, new_id("att-"), a.accelerator),)))
    for p in plan.preemptions:
        events.append(ev.Preempted(new_id("ev-"), p.attempt_id,
                                   f"preempted for {p.for_job} ({p.reason})"))
    return events
