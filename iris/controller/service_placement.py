"""Time and placement, on the controller's turn: the tick (lost workers, restart grace), the global
scheduling pass and the push of region inventories. Part of ControllerService (service.py).
"""

from __future__ import annotations

import logging

from iris.base.errors import InvalidRequestError, StorageError
from iris.base.ids import new_id
from iris.controller import colocate, queue_view, scheduler_view
from iris.controller.gangs import inventory
from iris.controller.gangs.tracking import host_facts
from iris.controller.jobs import event_log
from iris.controller.jobs import events as ev
from iris.controller.jobs.model import ACTIVE_ATTEMPT, TERMINAL_JOB
from iris.controller.regions import demand
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import SchedulerConfig, schedule
from iris.controller.turns import now_mono, now_wall, turn

_log = logging.getLogger(__name__)
# What changed in region inventories is pushed at most this often (and before any gang
# round): a delta costs what changed (gangs/inventory.py), whatever the fleet's size, so new
# hosts reach the regions' ledgers within 0.2 s...
SYNC_EVERY_S = 0.2
# ...but a WHOLE inventory (a region new to this controller, or one that refused a delta:
# it restarted, a push was lost) goes to a region no more often than every SYNC_S_PER_HOST
# x its hosts: a whole push is built, encoded, then checked by the Region actor, ~20 us a
# host in all (200 ms at 10,000 hosts on this 2-core machine, bench.fleet under py-spy).
# 20x that keeps whole pushes under 5 % of a core: every 4 s at 10,000 hosts.
SYNC_S_PER_HOST = 20 * 20e-6
# A Region that lost what it was pushed (it restarted; the last push was lost) is found
# within this long even when nothing changes: it gets an empty delta it cannot follow,
# refuses it, and is sent its whole inventory. One tiny message per region per 5 s; gangs
# meanwhile are offered from a stale view at worst, which the controller checks anyway.
KEEPALIVE_S = 5.0


class Placement:
    @turn
    def tick(self) -> None:
        now = now_mono(self)
        events: list[ev.Event] = [ev.Tick(new_id("ev-"))]
        lost = self.workers.lost(now)
        events += [ev.WorkerLost(new_id("ev-"), w, "no heartbeat") for w in lost]
        self._touch_hosts(lost)
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
        """Push each region what changed in its inventory (at most every SYNC_EVERY_S, and
        at once before a gang round that relies on it): the hosts touched since the last
        push are looked at again (O(1) each), never the whole fleet. A region due its whole
        inventory gets it at most every SYNC_S_PER_HOST x its hosts (or when forced)."""
        now = now_mono(self)
        if not force and now - self._synced_at < SYNC_EVERY_S:
            return
        touched, self._inv_touched = self._inv_touched, set()
        workers = self.workers.workers
        self.gangs.note_hosts(
            inventory.HostIs(h, host_facts(self.state, workers[h], self.stopping,
                                           self.draining))
            if h in workers else inventory.HostGone(h) for h in sorted(touched))
        fulls = [r for r, hosts in self.gangs.full_due({*self.unmet, *self.region_groups}).items()
                 if force or now - self._full_at.get(r, float("-inf"))
                 >= max(SYNC_EVERY_S, SYNC_S_PER_HOST * hosts)]
        self._full_at.update(dict.fromkeys(fulls, now))
        keepalive = now - self._keepalive_at >= KEEPALIVE_S
        if keepalive:
            self._keepalive_at = now
        queued = len(self.gangs.outbox)
        self.gangs.push_regions(self.unmet, self.region_groups, fulls, keepalive)
        if len(self.gangs.outbox) > queued:  # else the next change goes out at once
            self._synced_at = now

    def _touch_hosts(self, hosts) -> None:
        """These hosts' inventory facts may have changed (registered, lost, an attempt
        started or ended there, a stop began or ended, a drain): the next push looks."""
        self._inv_touched.update(hosts)

    def _touch_effects(self, effects: list) -> None:
        """Hosts whose attempts the kernel changed: every attempt it adds to or takes off a
        worker is in a Persist (lifecycle.Tx.touch); stops name their worker."""
        for e in effects:
            if isinstance(e, ev.Persist):
                self._inv_touched.update(a.worker_id for a in e.attempts)
            elif isinstance(e, ev.StartAttempt | ev.StopAttempt):
                self._inv_touched.add(e.worker_id)

    @turn
    def inventory_push_failed(self, region: str, seq: int, why: str) -> None:
        """A region refused (or never answered) push `seq`: it gets its whole inventory
        next (unless a whole one went after that push). A reclaimed region's are moot."""
        if region in self.gangs.inventory.regions and self.gangs.push_failed(region, seq):
            _log.warning("region %s: inventory push %d failed (%s); sending it whole",
                         region, seq, why)
            self._sync_regions()

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
