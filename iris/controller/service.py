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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import (
    InvalidRequestError,
    IrisError,
    StorageError,
)
from iris.base.histogram import Histogram
from iris.base.ids import new_id
from iris.base.resources import Resources
from iris.controller import live_figures, scheduler_view, stops
from iris.controller.bundle_store import BundleStore
from iris.controller.gangs.tracking import GangTracker, PlaceRound
from iris.controller.jobs import event_log, kernel
from iris.controller.jobs import events as ev
from iris.controller.jobs.spec import JobSpec
from iris.controller.jobs.state import KernelConfig
from iris.controller.jobs.store import JobStore
from iris.controller.launch import RESTORE_ATTEMPT_STRIDE, start_body
from iris.controller.regions.capacity import Offer
from iris.controller.regions.region import RegionScaling
from iris.controller.service_budgets import BudgetRequests
from iris.controller.service_figures import FiguresFeed
from iris.controller.service_placement import SYNC_EVERY_S, Placement
from iris.controller.service_regions import RegionRequests
from iris.controller.service_requests import JobRequests
from iris.controller.service_workers import REGISTRATIONS_PER_S, WorkerRequests
from iris.controller.turns import now_mono, now_wall
from iris.controller.usage import UsageBook
from iris.controller.workers import DEFAULT_DEAD_AFTER_S, WorkerInfo, WorkerTable
from iris.logstore.config import LogStoreConfig

_log = logging.getLogger(__name__)
__all__ = ["REGISTRATIONS_PER_S", "SYNC_EVERY_S", "Command", "ControllerConfig",
           "ControllerService", "JobsFinished"]


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
    # Called once, with why, when this controller must stop: its job store failed (disk full,
    # I/O error), or another controller took over its checkpoint prefix. `iris controller
    # serve` exits non-zero; None leaves the controller refusing (a store failure) or serving
    # without checkpoints (fenced).
    on_fatal: Callable[[str], None] | None = None
    # Checkpoints of the job store to GCS (checkpoint.CheckpointSettings); None: none taken.
    checkpoints: Any = None


@dataclass
class Command:
    """Something to tell a worker: kind "start" (launch dict) or "stop"."""

    kind: str
    worker_id: str
    address: str
    body: dict = field(default_factory=dict)


@dataclass(frozen=True)
class JobsFinished:
    """Jobs that reached a final state: whoever waits on them is woken."""

    job_ids: tuple[str, ...]


class ControllerService(JobRequests, WorkerRequests, Placement, RegionRequests,
                        BudgetRequests, FiguresFeed):
    """The controller's state and its one path of change (`_run_many`); its requests live in
    the mixins named above, one concern each."""

    def __init__(self, config: ControllerConfig, address: str, clock: Clock = SYSTEM_CLOCK):
        self.config = config
        self.address = address
        self.clock = clock
        self.store = JobStore(config.state_dir)
        self.store.prune(config.retention_s, clock.wall())
        self.state = self.store.load(KernelConfig(stop_grace_s=config.stop_grace_s))
        # Restored from a checkpoint: number attempts past anything a worker may have run.
        self.attempt_base = RESTORE_ATTEMPT_STRIDE * sum(
            1 for row in self.store.lineage() if row["what"] == "restored")
        self.workers = WorkerTable(config.worker_dead_after_s)
        self.bundles = BundleStore(config.state_dir / "bundles")
        self.commands: list[Command] = []
        self.finished: list[str] = []
        self.pending_reasons: dict[str, dict] = {}
        self.worker_stats: dict[str, dict] = {}  # worker id -> its last reported figures
        self._started = clock.monotonic()
        # Attempts told to stop whose exit is not reported yet (stops.py), kept in the store
        # too: after a restart, a requeued task still waits for its old attempt to exit.
        self.stops = self._load_stops()
        # Workers that had attempts (running, or stopping) before a restart and have not
        # come back yet.
        self._unclaimed = set(self.state.by_worker) | set(self.stops.by_worker)
        self._broken: str | None = None
        self._turn_now: tuple[float, float] | None = None  # (wall, monotonic): turns.py
        # Placement runs only after something changed (an event, a worker came or went):
        # a pass over 7,500 pending tasks cost 17-77 ms, too much for every 50 ms tick.
        self._placement_due = True
        # Multi-host gangs are reserved through the Region actors; this is the controller's
        # half (rounds in flight, hosts held, what each region's ledger should own).
        self.gangs = GangTracker(incarnation=new_id("inc-"))
        self.pass_seconds = Histogram()
        # The day-trace figures for this cluster (live_figures.py), fed after each commit
        # and on the tick.
        self.figures = live_figures.FiguresState()
        # The hosts as the scheduler sees them, kept between passes (scheduler_view.py).
        self.fleet_view = scheduler_view.FleetView()
        # Autoscaled regions: their groups, their last reports, the demand routed to them.
        self.region_groups = {r.region: list(r.groups) for r in config.autoscale}
        self.region_reports: dict[str, dict] = {}
        self.unmet: dict[str, dict[str, int]] = {}
        # Hosts whose idle slice a region is about to delete (host -> slice): nothing new
        # is placed on them (drain, then delete: work is never started on a dying slice).
        self.draining: dict[str, str] = {}
        # Hosts whose inventory facts may have changed since the last push (_touch_hosts),
        # when it was, and when each region last got its whole inventory.
        self._inv_touched: set[str] = set()
        self._synced_at = float("-inf")
        self._full_at: dict[str, float] = {}
        self._keepalive_at = clock.monotonic()
        # Every region a worker or the config ever named: each becomes an actor (max_regions).
        self._regions_seen: set[str] = set(self.region_groups)
        self._registrations = 0
        self._live_fits: tuple = (None, None)  # (workers key, checker) for _catalogue
        self._admission, self._admitted_at = float(REGISTRATIONS_PER_S), clock.monotonic()
        self._init_budgets()
        # What attempts use (series, totals) and their named ports (usage.py, issue 31).
        self.usage = UsageBook(self.store.usage_series)
        self._admit_slot = float("-inf")  # the last retry time handed to a refused worker

    # ------------------------------------------------------------ the one path of change

    def _run(self, event: ev.Event) -> list:
        return self._run_many([event])

    def _run_many(self, events: list, schedule: bool = False) -> list:
        """Apply events (then, with `schedule`, the placements they make possible), commit
        everything in one transaction, and only then act."""
        if self._broken:
            raise IrisError(f"controller halted after a storage failure: {self._broken}")
        now = now_wall(self)
        effects: list = []
        log: list[tuple[float, str, bytes]] = []  # the events that changed state, for replay
        self._handle_all(events, now, effects, log)
        self._touch_effects(effects)
        if log:
            self._placement_due = True
        passed = schedule and self._placement_due
        if passed:
            self._placement_due = False
            placed: list = []
            self._handle_all(self._scheduled(), now, placed, log)
            self._touch_effects(placed)
            effects += placed
        if effects or passed:
            # Rounds whose gang ended are released; each region's ledger learns its hosts.
            self.gangs.release_ended(self.state)
            self._sync_regions(force=any(isinstance(m, PlaceRound) for m in self.gangs.outbox))
        if not effects:
            return effects
        self._commit([e for e in effects if isinstance(e, ev.Persist)], log)
        self._figures_observe(effects)
        for effect in effects:
            self._act(effect)
        return effects

    def _commit(self, persists: list[ev.Persist], log: list) -> None:
        try:
            self.store.apply(persists, log, self.usage.take_rows())
        except InvalidRequestError:
            # Memory ran ahead of the disk with data the disk refused: go back to what the
            # disk holds (crash-only, without the crash). Only this request fails.
            self.state = self.store.load(KernelConfig(stop_grace_s=self.config.stop_grace_s))
            self._placement_due = True
            self._touch_hosts(self.workers.workers)  # rare: every host's attempts may differ
            raise
        except StorageError as exc:
            # The disk failed: memory now claims what the disk does not hold. Stop for good
            # and say so, so that a supervisor restarts the controller from its file.
            self._broken = str(exc)
            _log.critical("controller halted: job store failed: %s", exc)
            if self.config.on_fatal is not None:
                self.config.on_fatal(f"the job store failed: {self._broken}")
            raise

    def _handle_all(self, events: list, now: float, effects: list, log: list) -> None:
        for event in events:
            _, out = kernel.handle(self.state, event, now)
            effects.extend(out)
            if event_log.changed_state(out):
                log.append((now, *event_log.encode(event)))

    def _act(self, effect: Any) -> None:
        if isinstance(effect, ev.StartAttempt):
            self._queue_start(effect)
        elif isinstance(effect, ev.StopAttempt):
            worker = self.workers.workers.get(effect.worker_id)
            attempt = self.state.attempts.get(effect.attempt_id)
            if worker is not None:  # it holds its resources until it is gone
                hold = scheduler_view.attempt_resources(
                    self.state.jobs[attempt.job_id].spec, attempt.accelerator) if attempt else None
                self._queue_stop(worker, effect.attempt_id, effect.grace_s, effect.reason,
                                 hold)
        elif isinstance(effect, ev.JobFinished):
            self.finished.append(effect.job_id)
            self.pending_reasons.pop(effect.job_id, None)
        elif isinstance(effect, ev.Ignored):
            _log.info("event %s ignored: %s", effect.event_id, effect.reason)

    @property
    def stopping(self) -> dict[str, dict[str, Resources]]:
        """worker -> attempt -> resources of attempts told to stop and not gone yet."""
        return self.stops.by_worker

    def _load_stops(self) -> stops.StopState:
        state = stops.StopState()
        for attempt_id, worker_id, hold, grace_s in self.store.load_stops():
            # Sent again after its grace + 5 s unless the worker reports it gone first.
            stops.handle(state, stops.StopSent(worker_id, attempt_id, grace_s,
                                               Resources.from_dict(hold)),
                         self.clock.monotonic())
        return state

    def _save_stops(self, **change: Any) -> None:
        try:
            self.store.save_stops(**change)
        except StorageError as exc:  # the next commit halts a failing disk; this is a hint
            _log.error("%s", exc)

    def _queue_stop(self, worker: WorkerInfo, attempt_id: str, grace_s: float,
                    reason: str, hold: Resources | None = None) -> None:
        stops.handle(self.stops, stops.StopSent(worker.worker_id, attempt_id, grace_s, hold),
                     now_mono(self))
        self._touch_hosts((worker.worker_id,))
        if hold is not None:
            self._save_stops(held=[(attempt_id, worker.worker_id, hold.to_dict(), grace_s)])
        self.commands.append(Command("stop", worker.worker_id, worker.address, {
            "attempt_id": attempt_id, "grace_s": grace_s, "reason": reason}))

    def _queue_start(self, start: ev.StartAttempt) -> None:
        worker = self.workers.workers.get(start.worker_id)
        if worker is None:
            return  # lost meanwhile: the WorkerLost event requeues the task
        self.commands.append(Command("start", worker.worker_id, worker.address, start_body(
            self.state, self.workers.workers, start, self.address, self.log_store,
            self.attempt_base)))

    @property
    def log_store(self) -> LogStoreConfig:
        return self.config.log_store or LogStoreConfig(
            kind="local", root=str(self.config.state_dir / "logs"))

    def take_effects(self) -> list:
        """Everything the turns since the last call decided for the world outside, in the
        order the shell acts on it: region inventories and gang rounds (inventory first: a
        round relies on it), commands to workers, then the jobs that finished."""
        effects: list = self.gangs.take_outbox()
        effects += self.take_commands()
        finished, self.finished = self.finished, []
        if finished:
            effects.append(JobsFinished(tuple(finished)))
        return effects

    def take_commands(self) -> list[Command]:
        """Only the commands to workers (what tests of the service look at)."""
        commands, self.commands = self.commands, []
        return commands

    def _parent_spec(self, raw: dict) -> JobSpec | None:
        parent = raw.get("parent") if isinstance(raw, dict) else None
        job = self.state.jobs.get(parent) if isinstance(parent, str) else None
        return job.spec if job else None

    def close(self) -> None:
        self.store.close()

