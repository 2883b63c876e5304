"""The controller's logic without sockets: kernel + store + worker table + placement.

Not the actor (actor.py) — that shell reads requests off the wire, calls these methods on
its own thread, and sends the `commands` they leave behind to workers. Every change goes
through `_run`: the kernel decides, the Persist effects are committed in one transaction,
and only then are commands queued and answers returned, so nothing acknowledged is lost.
If the commit fails the service refuses everything from then on (crash-only): memory would
otherwise claim what the disk does not hold.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import (
    InvalidRequestError,
    IrisError,
    NotFoundError,
    OverloadedError,
    StorageError,
)
from iris.base.histogram import Histogram
from iris.base.ids import new_id
from iris.base.resources import Resources
from iris.controller import demand, scheduler_view
from iris.controller.bundle_store import BundleStore
from iris.controller.capacity import Offer, fits_checker, offers_from_workers
from iris.controller.gang_tracking import GangTracker, PlaceRound
from iris.controller.jobs import events as ev
from iris.controller.jobs import kernel, views
from iris.controller.jobs.spec import JobSpec, validate_submit
from iris.controller.jobs.state import KernelConfig
from iris.controller.jobs.store import JobStore
from iris.controller.launch import start_body
from iris.controller.regions import RegionScaling
from iris.controller.repair import repairs
from iris.controller.scheduling.dry_run import dry_run
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import schedule
from iris.controller.workers import DEFAULT_DEAD_AFTER_S, WorkerInfo, WorkerTable
from iris.logstore.config import LogStoreConfig
from iris.wire import control, schema

_log = logging.getLogger(__name__)
# New registrations admitted per second (and the burst): a registration costs ~1 ms here, so
# this keeps a re-registration storm from 10,000 hosts under half the controller's time.
REGISTRATIONS_PER_S = 500
# Region inventories are pushed at most this often (and before any gang round).
SYNC_EVERY_S = 0.2
_REGION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class ControllerConfig:
    state_dir: Path
    # Finished jobs are kept this long, then pruned so the database stays bounded.
    retention_s: float = 7 * 24 * 3600.0
    # A worker silent this long is lost and its attempts requeued (issue: notice in <= 5 s).
    worker_dead_after_s: float = DEFAULT_DEAD_AFTER_S
    # After a restart, workers get this long to re-register before their attempts count as
    # lost. As long as the silence timeout, for the same reason (wire/fencing.py): a worker
    # that cannot come back has had its lease lapse and its attempts stopped by then.
    restart_grace_s: float = DEFAULT_DEAD_AFTER_S
    # SIGTERM -> SIGKILL grace when the controller stops an attempt.
    stop_grace_s: float = 10.0
    # Where workers ship task logs; None = a local directory, <state_dir>/logs.
    log_store: LogStoreConfig | None = None
    # Host shapes the cluster can ever offer; submits nothing could run are refused.
    # None: shape checks only (a controller without a cluster config).
    offers: tuple[Offer, ...] | None = None
    # Regions that grow and shrink their scale groups through a provider (issue 7); other
    # regions are whatever workers register.
    autoscale: tuple[RegionScaling, ...] = ()
    # Each region is an actor with its own thread in this process, made when a worker first
    # names it: 200 fake workers with made-up regions once took the controller from 12 to 212
    # threads. Real fleets span a handful of regions; past this a new one is refused.
    max_regions: int = 64
    # Without offers from a config, a request no registered worker could ever hold is
    # refused at submit. True: accept it as pending (more, larger workers are expected).
    accept_unfit: bool = False
    # Called once when the job store fails (disk full, I/O error): `iris controller serve`
    # exits non-zero so its supervisor restarts it; None leaves the controller refusing.
    on_fatal: Callable[[str], None] | None = None


@dataclass
class Command:
    """Something to tell a worker: kind "start" (launch dict) or "stop"."""

    kind: str
    worker_id: str
    address: str
    body: dict = field(default_factory=dict)


class ControllerService:
    def __init__(self, config: ControllerConfig, address: str, clock: Clock = SYSTEM_CLOCK):
        self.config = config
        self.address = address
        self.clock = clock
        self.store = JobStore(config.state_dir)
        self.store.prune(config.retention_s, clock.wall())
        self.state = self.store.load(KernelConfig(stop_grace_s=config.stop_grace_s))
        self.workers = WorkerTable(config.worker_dead_after_s)
        self.bundles = BundleStore(config.state_dir / "bundles")
        self.commands: list[Command] = []
        self.finished: list[str] = []
        self.pending_reasons: dict[str, dict] = {}
        self.worker_stats: dict[str, dict] = {}  # worker id -> its last reported figures
        self._started = clock.monotonic()
        # Workers that had attempts before a restart and have not come back yet.
        self._unclaimed = set(self.state.by_worker)
        self._broken: str | None = None
        # Placement runs only after something changed (an event, a worker came or went):
        # a pass over 7,500 pending tasks cost 17-77 ms, too much for every 50 ms tick.
        self._placement_due = True
        # Attempts told to stop whose exit is not reported yet: they still hold their
        # worker's resources (a grace period can last 10 s), so placement counts them.
        self.stopping: dict[str, dict[str, Resources]] = {}
        self._stop_sent: dict[str, tuple[float, float]] = {}  # attempt -> (sent at, grace)
        self._fits = fits_checker(config.offers) if config.offers is not None else None
        # Multi-host gangs are reserved through the Region actors; this is the controller's
        # half (rounds in flight, hosts held, what each region's ledger should own).
        self.gangs = GangTracker()
        self.pass_seconds = Histogram()
        # Autoscaled regions: their groups, their last reports, the demand routed to them.
        self.region_groups = {r.region: list(r.groups) for r in config.autoscale}
        self.region_reports: dict[str, dict] = {}
        self.unmet: dict[str, dict[str, int]] = {}
        # Hosts whose idle slice a region is about to delete (host -> slice): nothing new
        # is placed on them (drain, then delete: work is never started on a dying slice).
        self.draining: dict[str, str] = {}
        self._inventory_dirty, self._synced_at = True, float("-inf")
        # Every region a worker or the config ever named: each becomes an actor (max_regions).
        self._regions_seen: set[str] = set(self.region_groups)
        self._registrations = 0
        self._live_fits: tuple = (None, None)  # (workers key, checker) for _fits_live
        self._admission, self._admitted_at = float(REGISTRATIONS_PER_S), clock.monotonic()

    # ------------------------------------------------------------ requests

    def submit(self, raw: dict) -> dict:
        if isinstance(raw, dict) and raw.get("bundle") and not self.bundles.has(raw["bundle"]):
            raise InvalidRequestError(f"bundle: {str(raw['bundle'])[:12]} was never uploaded "
                                      "(put_bundle first)", "bundle")
        parent = self._parent_spec(raw)
        spec = validate_submit(raw, parent=parent, fits=self._fits or self._fits_live())
        # The submit and its placement commit in one transaction: one fsync per job.
        effects = self._run_many([ev.Submit(new_id("ev-"), spec)], schedule=True)
        accepted = next(e for e in effects if isinstance(e, ev.Accepted))
        return {"job_id": accepted.job_id, "duplicate": accepted.duplicate}

    def _fits_live(self):
        """Without a config's offers, the registered workers bound what can ever run (one
        verdict: a request no host can hold is refused at submit, not left pending). None
        with no workers yet, or when the config says more may join (accept_unfit)."""
        if self.config.accept_unfit or not self.workers.workers:
            return None
        key = (len(self.workers.workers), self._registrations)
        if self._live_fits[0] != key:
            self._live_fits = (key, fits_checker(offers_from_workers(
                self.workers.workers.values())))
        return self._live_fits[1]

    def dry_run(self, raw: dict) -> dict:
        """Would this submission fit now, and where (the real scheduler; changes nothing)."""
        spec = validate_submit(raw, parent=self._parent_spec(raw), fits=self._fits)
        hosts = scheduler_view.host_views(self.state, self.workers.workers.values(),
                                          self.stopping)
        return dry_run(hosts, scheduler_view.task_demands(spec, self.clock.wall()))

    def kill(self, job_id: str, reason: str = "killed by user") -> dict:
        self._run(ev.Kill(new_id("ev-"), job_id, reason))
        return views.job_view(self.state, job_id, tasks=False)

    def status(self, job_id: str) -> dict:
        view = views.job_view(self.state, job_id)
        if job_id in self.pending_reasons:
            view["pending_reason"] = self.pending_reasons[job_id]
        return view

    def list_jobs(self, prefix: str | None = None, include_finished: bool = True) -> list[dict]:
        rows = views.list_jobs(self.state, prefix=prefix, include_finished=include_finished)
        for row in rows:
            if row["job_id"] in self.pending_reasons:
                row["pending_reason"] = self.pending_reasons[row["job_id"]]
        return rows

    def results(self, job_id: str) -> dict[int, bytes]:
        if job_id not in self.state.jobs:
            raise NotFoundError(f"no job {job_id}")
        return self.store.results(job_id)

    def list_workers(self) -> list[dict]:
        now = self.clock.monotonic()
        rows = []
        for info in self.workers.workers.values():
            row = info.as_dict(now)
            row["attempts"] = sorted(self.state.by_worker.get(info.worker_id, ()))
            rows.append(row)
        return sorted(rows, key=lambda r: r["worker_id"])

    def snapshot(self) -> dict:
        """Plain data for dashboards and metrics, built on the controller's thread."""
        counts: dict[str, int] = {}
        for job in self.state.jobs.values():
            counts[job.state.value] = counts.get(job.state.value, 0) + 1
        return {
            "at": self.clock.wall(), "workers": self.list_workers(),
            "pending_reasons": dict(self.pending_reasons), "jobs_by_state": counts,
            "summary": self.state.summary(), "pending_tasks": len(self.state.pending),
            "log_shipping": self._log_shipping(),
            "scheduling_passes": self.pass_seconds.as_dict(),
            "gangs": {"reserving": len(self.gangs.reserving), "placed": len(self.gangs.placed)},
            "capacity": [rep["capacity"] for _, rep in sorted(self.region_reports.items())
                         if "capacity" in rep],
            "unmet": {r: dict(g) for r, g in self.unmet.items()},
        }

    def _log_shipping(self) -> dict:
        """Worst shipping lag and total dropped lines over the live workers' last reports."""
        live = [s.get("log_shipping") for w, s in self.worker_stats.items()
                if w in self.workers.workers and isinstance(s.get("log_shipping"), dict)]
        if not live:
            return {}
        return {"max_flush_lag_s": max(float(s.get("max_flush_lag_s", 0.0)) for s in live),
                "dropped_lines": sum(int(s.get("dropped_lines", 0)) for s in live)}

    def job_state(self, job_id: str) -> str | None:
        job = self.state.jobs.get(job_id)
        return job.state.value if job else None

    # ------------------------------------------------------------ workers

    def register_worker(self, worker_id: Any, address: Any, attributes: Any, running: Any,
                        updates: Any = ()) -> list[dict]:
        """(Re)register. `updates` are what the worker has not had acknowledged: they are
        applied before the reconcile, so an attempt that finished while the controller was
        away counts as finished, not as lost. Checked whole before anything changes."""
        msg = control.decode(control.WorkerRegistration, {
            "worker_id": worker_id, "address": address, "attributes": attributes,
            "running": running, "updates": updates})
        self._check_region(msg.attributes.get("region", "local"), msg.worker_id)
        self._admit(msg.worker_id, msg.address)
        self.workers.register(msg.worker_id, msg.address, msg.attributes,
                              self.clock.monotonic())
        self._regions_seen.add(msg.attributes.get("region", "local"))
        self._registrations += 1
        self._unclaimed.discard(msg.worker_id)
        self._placement_due = True
        _log.info("worker %s registered at %s running %d attempts: %s", msg.worker_id,
                  msg.address, len(msg.running), ", ".join(msg.running))
        events = [self._update_event(msg.worker_id, u) for u in msg.updates]
        still = set(msg.running)  # what it no longer runs is not stopping any more
        for attempt_id in [a for a in self.stopping.get(msg.worker_id, {}) if a not in still]:
            self._stopped(attempt_id)
        events.append(ev.Reconcile(new_id("ev-"), msg.worker_id, msg.running))
        self._run_many([e for e in events if e is not None], schedule=True)
        return views.desired_attempts(self.state, msg.worker_id)

    def report(self, worker_id: Any, updates: Any, stats: Any = None,
               running: Any = None) -> dict:
        """Attempt updates from a worker (also its heartbeat). Unknown worker: re-register.
        `stats`: the worker's own figures for /metrics, e.g. {"log_shipping":
        {"max_flush_lag_s": x, "dropped_lines": n}}; kept as last reported. `running`: the
        attempts it runs now, to repair lost start and stop commands (repair.py)."""
        msg = control.decode(control.WorkerReport, {
            "worker_id": worker_id, "updates": updates, "stats": stats, "running": running})
        if not self.workers.heard(msg.worker_id, self.clock.monotonic()):
            return {"acked": [], "reregister": True}
        if msg.stats is not None:
            self.worker_stats[msg.worker_id] = msg.stats
        batch = [self._update_event(msg.worker_id, u) for u in msg.updates]
        self._run_many([e for e in batch if e is not None], schedule=bool(msg.updates))
        if msg.running is not None:
            self._repair(msg.worker_id, list(msg.running))
        return {"acked": [u.attempt_id for u in msg.updates], "reregister": False}

    def worker_gone(self, worker_id: Any, address: Any, why: str) -> None:
        """A worker stopped (goodbye) or died and its watchdog stopped its attempts: lost now,
        its work requeued at once. Only the registration at `address` is meant: a worker
        that already came back elsewhere under the same id is left alone."""
        worker_id = schema.text(worker_id, "worker_id", max_len=256)
        address = schema.text(address, "address", max_len=512)
        info = self.workers.workers.get(worker_id)
        if info is None or info.address != address:
            return
        del self.workers.workers[worker_id]
        self._forget_stops(worker_id)
        self.draining.pop(worker_id, None)
        self._placement_due = True
        self._run_many([ev.WorkerLost(new_id("ev-"), worker_id, why)], schedule=True)

    def _admit(self, worker_id: str, address: str) -> None:
        """Registrations are admitted at a bounded rate (a token bucket of
        REGISTRATIONS_PER_S); past it the worker is told when to come back. A mass
        re-registration (a network heal, a controller restart) then spreads out instead of
        starving the loop that answers heartbeats: the overload must not feed itself."""
        known = self.workers.workers.get(worker_id)
        if known is not None and known.address == address:
            return  # a refresh costs little
        now = self.clock.monotonic()
        self._admission = min(REGISTRATIONS_PER_S, self._admission
                              + (now - self._admitted_at) * REGISTRATIONS_PER_S)
        self._admitted_at = now
        if self._admission < 1.0:
            wait = (1.0 - self._admission) / REGISTRATIONS_PER_S + random.random()
            raise OverloadedError(f"too many registrations at once: retry in {wait:.1f} s",
                                  retry_after_s=wait)
        self._admission -= 1.0

    def _check_region(self, region: str, worker_id: str) -> None:
        """A region name must be well formed, and a new one must fit under max_regions."""
        if not _REGION_NAME.fullmatch(region):
            raise InvalidRequestError(f"attributes.region: {region[:80]!r} is not a region name "
                                      "(letters, digits, '.', '_' and '-', at most 64)",
                                      "attributes.region")
        known = self._regions_seen
        if region not in known and len(known) >= self.config.max_regions:
            raise InvalidRequestError(
                f"attributes.region: {region!r} would be region {len(known) + 1}; this "
                f"controller serves at most {self.config.max_regions} (max_regions)",
                "attributes.region")

    def _repair(self, worker_id: str, running: list[str]) -> None:
        """Send again what a lost call never delivered (see repair.py)."""
        worker = self.workers.workers[worker_id]
        fix = repairs(self.state, worker_id, running, self.stopping.get(worker_id, {}),
                      self._stop_sent, self.clock.wall(), self.clock.monotonic())
        for attempt_id in fix.stopped:
            self._stopped(attempt_id)
        for attempt_id in fix.start_again:
            _log.warning("worker %s never started %s: sending the start again", worker_id,
                         attempt_id)
            attempt = self.state.attempts[attempt_id]
            spec = self.state.jobs[attempt.job_id].spec
            self._queue_start(ev.StartAttempt(worker_id, attempt_id, attempt.job_id,
                                              attempt.task_index, spec.num_tasks,
                                              spec.gang_size))
        for attempt_id in fix.orphans:  # then stopped like any other, until it is gone
            self.stopping.setdefault(worker_id, {})[attempt_id] = Resources()
        for attempt_id in fix.stop_again + fix.orphans:
            _log.warning("worker %s still runs %s: sending the stop again", worker_id,
                         attempt_id)
            self._queue_stop(worker, attempt_id, self.config.stop_grace_s,
                             "stopped again: the first stop was lost, or nobody wants it")


    def _update_event(self, worker_id: str, update: control.AttemptUpdate) -> ev.Event | None:
        """The kernel event for a worker's update; None for an attempt that is not this
        worker's (fenced: a stale or foreign attempt can never report for a task)."""
        attempt = self.state.attempts.get(update.attempt_id)
        if attempt is not None and attempt.worker_id != worker_id:
            _log.warning("worker %s reported %s on attempt %s of worker %s: ignored",
                         worker_id, update.status, update.attempt_id, attempt.worker_id)
            return None
        if update.status in ("exited", "preempted"):
            self._stopped(update.attempt_id)
        eid = new_id("ev-")
        if update.status == "building":
            return ev.AttemptBuilding(eid, update.attempt_id)
        if update.status == "running":
            return ev.AttemptRunning(eid, update.attempt_id)
        if update.status == "preempted":  # fenced: spends the preemption budget
            return ev.Preempted(eid, update.attempt_id, update.error or "preempted")
        code = update.exit_code if update.exit_code is not None else 1
        return ev.AttemptExited(eid, update.attempt_id, code, update.error, update.result)

    def _forget_stops(self, worker_id: str) -> None:
        """A worker is gone, and with it whatever it was stopping."""
        for attempt_id in self.stopping.pop(worker_id, {}):
            self._stop_sent.pop(attempt_id, None)

    def _stopped(self, attempt_id: str) -> None:
        self._stop_sent.pop(attempt_id, None)
        for worker_id, attempts in list(self.stopping.items()):
            if attempts.pop(attempt_id, None) is not None:
                self._placement_due = True
                if not attempts:
                    del self.stopping[worker_id]

    # ------------------------------------------------------------ time

    def tick(self) -> None:
        now = self.clock.monotonic()
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
            self._unclaimed.clear()
        self._run_many(events, schedule=True)
        self._sync_regions()  # what changed since the last push, at most every SYNC_EVERY_S

    def _sync_regions(self, force: bool = False) -> None:
        """Push each region its inventory. Walking every worker costs O(fleet), so this runs
        at most every SYNC_EVERY_S (a burst of 10,000 registrations once made it O(N^2)),
        and at once before a gang round that relies on it."""
        now = self.clock.monotonic()
        if self._inventory_dirty and (force or now - self._synced_at >= SYNC_EVERY_S):
            self._inventory_dirty, self._synced_at = False, now
            self.gangs.sync_regions(self.state, self.workers.workers.values(), self.stopping,
                                    self.unmet, self.region_groups, self.draining)

    def prune(self) -> None:
        self._run(ev.Prune(new_id("ev-"), self.config.retention_s))

    def _scheduled(self) -> list[ev.Event]:
        """The global scheduler's pass over every pending task: Assign events, Preempted
        events for lower-band attempts it evicts to make room, and gang requests, which the
        tracker turns into reservation rounds through the Region actors. Work no region has
        room for becomes the autoscalers' demand (self.unmet)."""
        self.pending_reasons = {}
        self.unmet = {}
        if not self.state.pending:
            return []
        demands, unplaced = [], {}
        for job_id, index in self.state.pending:
            job = self.state.jobs[job_id]
            if job.spec.gang_size > 1:
                cooling = self.gangs.waiting(scheduler_view.gang_id(job.spec, index),
                                             self.clock.monotonic())
                if cooling is not None:  # every region refused it: capacity must grow
                    self.pending_reasons[job_id] = cooling
                    unplaced[job_id] = unplaced.get(job_id, 0) + 1
                    continue
            try:
                demands += scheduler_view.task_demands(job.spec, job.submitted_at, (index,))
            except InvalidRequestError as exc:  # one bad job must not stop every pass
                self.pending_reasons[job_id] = {"code": "INVALID", "message": str(exc),
                                                "details": {}}
        hosts = scheduler_view.host_views(self.state, self.workers.workers.values(),
                                          self.stopping,
                                          held=self.gangs.held_hosts() | set(self.draining))
        started = self.clock.monotonic()
        plan = schedule(hosts, demands, reserving_gangs=set(self.gangs.reserving),
                        scaling_up=demand.scaling_up(self.region_reports))
        self.pass_seconds.observe(self.clock.monotonic() - started)
        events: list[ev.Event] = []
        for a in plan.assignments:
            job_id, index = scheduler_view.parse_task_id(a.task_id)
            events.append(ev.Assign(new_id("ev-"), (
                ev.Placement(job_id, index, a.host_id, new_id("att-")),)))
        for p in plan.preemptions:
            events.append(ev.Preempted(new_id("ev-"), p.attempt_id,
                                       f"preempted for {p.for_job} ({p.reason})"))
        for request in plan.gang_requests:
            self.gangs.request(request)
        for task, reason in plan.reasons.items():
            job_id = scheduler_view.parse_task_id(task)[0]
            self.pending_reasons.setdefault(job_id, reason.to_dict())
            if reason.code in (ReasonCode.NO_CAPACITY, ReasonCode.SCALING_UP):
                unplaced[job_id] = unplaced.get(job_id, 0) + 1
        if self.region_groups and unplaced:
            self.unmet = demand.plan_growth(
                [(self.state.jobs[j].spec, n) for j, n in unplaced.items()],
                self.region_groups, self.region_reports, self.pending_reasons)
        return events

    # ------------------------------------------------------------ regions

    def set_region_reports(self, reports: dict[str, dict]) -> None:
        """The Region actors' latest stats (reservations, capacity, scaling_up, blocked).
        A change in what is scaling or held back re-runs placement: reasons and routing
        depend on it."""
        def scaling(reps: dict) -> dict:
            return {r: (rep.get("scaling_up"), rep.get("blocked")) for r, rep in reps.items()}
        if scaling(reports) != scaling(self.region_reports):
            self._placement_due = True
        self.region_reports = dict(reports)
        self.hosts_gone({h: str(why) for rep in reports.values()
                         for h, why in rep.get("gone_hosts", {}).items()})

    def drain_hosts(self, hosts: Any) -> None:
        """A region wants to delete these hosts' idle slice (host -> slice): place nothing
        more on them; the next sync tells it which run nothing (then it deletes)."""
        msg = control.decode(control.DrainHosts, {"hosts": hosts})
        self.draining.update({h: s for h, s in msg.hosts.items() if h in self.workers.workers})
        self._placement_due = True
        self._run_many([], schedule=True)
        self._sync_regions(force=True)  # the region waits on this answer

    def undrain_hosts(self, hosts: Any) -> None:
        """The region kept the slice after all (work reached it first): place on it again."""
        msg = control.decode(control.UndrainHosts, {"hosts": hosts})
        for host in msg.hosts:
            self.draining.pop(host, None)
        self._placement_due = True
        self._run_many([], schedule=True)
        self._sync_regions(force=True)  # the region waits on this answer

    def hosts_gone(self, gone: Any) -> None:
        """Workers whose slice a region deleted (host id -> why): lost now, their work
        requeued, instead of at the heartbeat timeout; nothing more is placed on them."""
        msg = control.decode(control.HostsGone, {"gone": gone})
        for host in msg.gone:
            self.draining.pop(host, None)
        gone = {h: why for h, why in msg.gone.items() if h in self.workers.workers}
        if not gone:
            return
        for worker_id in gone:
            del self.workers.workers[worker_id]
            self._forget_stops(worker_id)
        self._placement_due = True
        self._run_many([ev.WorkerLost(new_id("ev-"), w, why) for w, why in sorted(gone.items())],
                       schedule=True)

    # ------------------------------------------------------------ gangs

    def gang_placed(self, round_id: str, region: str, hosts: list[str]) -> None:
        """The coordinator committed a round in `region`: assign the gang's tasks there."""
        if not (isinstance(round_id, str) and isinstance(region, str) and isinstance(hosts, list)
                and all(isinstance(h, str) for h in hosts)):
            raise InvalidRequestError("gang_placed: expected a round id, a region and a list "
                                      "of host ids", "round_id")
        placements, problem = self.gangs.placed_round(
            round_id, region, hosts, self.state, self.workers.workers, self.stopping,
            lambda: new_id("att-"))
        if problem is not None:
            self.pending_reasons[round_id.rsplit("#", 1)[0]] = problem
        events = [ev.Assign(new_id("ev-"), tuple(placements))] if placements else []
        self._placement_due = True
        self._run_many(events, schedule=True)

    def gang_unplaceable(self, round_id: str, reasons: dict) -> None:
        """Every candidate region refused the round; the pass shows their reasons."""
        if not (isinstance(round_id, str) and isinstance(reasons, dict)):
            raise InvalidRequestError("gang_unplaceable: expected a round id and a dict of "
                                      "region -> reason", "round_id")
        self.gangs.unplaceable(round_id, reasons, self.clock.monotonic())
        self._placement_due = True
        self._run_many([], schedule=True)

    def take_gang_messages(self) -> list:
        return self.gangs.take_outbox()

    # ------------------------------------------------------------ the one path of change

    def _run(self, event: ev.Event) -> list:
        return self._run_many([event])

    def _run_many(self, events: list, schedule: bool = False) -> list:
        """Apply events (then, with `schedule`, the placements they make possible), commit
        everything in one transaction, and only then act."""
        if self._broken:
            raise IrisError(f"controller halted after a storage failure: {self._broken}")
        now = self.clock.wall()
        effects: list = []
        for event in events:
            _, out = kernel.handle(self.state, event, now)
            effects.extend(out)
        if any(isinstance(e, ev.Persist) for e in effects):
            self._placement_due = True
        passed = schedule and self._placement_due
        if passed:
            self._placement_due = False
            for decision in self._scheduled():
                _, out = kernel.handle(self.state, decision, now)
                effects.extend(out)
        if effects or passed:
            # Rounds whose gang ended are released; each region's ledger learns its hosts.
            self.gangs.release_ended(self.state)
            self._inventory_dirty = True
            self._sync_regions(force=any(isinstance(m, PlaceRound) for m in self.gangs.outbox))
        if not effects:
            return effects
        persists = [e for e in effects if isinstance(e, ev.Persist)]
        try:
            self.store.apply(persists)
        except InvalidRequestError:
            # Memory ran ahead of the disk with data the disk refused: go back to what the
            # disk holds (crash-only, without the crash). Only this request fails.
            self.state = self.store.load(KernelConfig(stop_grace_s=self.config.stop_grace_s))
            self._placement_due = True
            raise
        except StorageError as exc:
            # The disk failed: memory now claims what the disk does not hold. Stop for good
            # and say so, so that a supervisor restarts the controller from its file.
            self._broken = str(exc)
            _log.critical("controller halted: job store failed: %s", exc)
            if self.config.on_fatal is not None:
                self.config.on_fatal(self._broken)
            raise
        for effect in effects:
            self._act(effect)
        return effects

    def _act(self, effect: Any) -> None:
        if isinstance(effect, ev.StartAttempt):
            self._queue_start(effect)
        elif isinstance(effect, ev.StopAttempt):
            worker = self.workers.workers.get(effect.worker_id)
            attempt = self.state.attempts.get(effect.attempt_id)
            if worker is not None and attempt is not None:
                self.stopping.setdefault(worker.worker_id, {})[effect.attempt_id] = \
                    self.state.jobs[attempt.job_id].spec.resources
            if worker is not None:
                self._queue_stop(worker, effect.attempt_id, effect.grace_s, effect.reason)
        elif isinstance(effect, ev.JobFinished):
            self.finished.append(effect.job_id)
            self.pending_reasons.pop(effect.job_id, None)
        elif isinstance(effect, ev.Ignored):
            _log.info("event %s ignored: %s", effect.event_id, effect.reason)

    def _queue_stop(self, worker: WorkerInfo, attempt_id: str, grace_s: float,
                    reason: str) -> None:
        self._stop_sent[attempt_id] = (self.clock.monotonic(), grace_s)
        self.commands.append(Command("stop", worker.worker_id, worker.address, {
            "attempt_id": attempt_id, "grace_s": grace_s, "reason": reason}))

    def _queue_start(self, start: ev.StartAttempt) -> None:
        worker = self.workers.workers.get(start.worker_id)
        if worker is None:
            return  # lost meanwhile: the WorkerLost event requeues the task
        self.commands.append(Command("start", worker.worker_id, worker.address, start_body(
            self.state, self.workers.workers, start, self.address, self.log_store)))

    @property
    def log_store(self) -> LogStoreConfig:
        return self.config.log_store or LogStoreConfig(
            kind="local", root=str(self.config.state_dir / "logs"))

    def take_commands(self) -> list[Command]:
        commands, self.commands = self.commands, []
        return commands

    def take_finished(self) -> list[str]:
        finished, self.finished = self.finished, []
        return finished

    def _parent_spec(self, raw: dict) -> JobSpec | None:
        parent = raw.get("parent") if isinstance(raw, dict) else None
        job = self.state.jobs.get(parent) if isinstance(parent, str) else None
        return job.spec if job else None

    def close(self) -> None:
        self.store.close()

