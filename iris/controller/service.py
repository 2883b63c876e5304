"""The controller's logic without sockets: the job kernel and its store, the one path of change,
and the components that own the rest.

Not the actor (actor.py): that shell reads requests off the wire, calls these methods on its
own thread, and sends the effects they leave behind. Every change goes through `run_many`:
the kernel decides, the Persist effects are committed in one transaction, and only then are
commands queued and answers returned, so nothing acknowledged is lost. If the commit fails
the service refuses everything from then on (crash-only): memory would otherwise claim what
the disk does not hold.

The components, each owning its fields behind a small interface (docs/architecture.md):
`desk` (worker_desk.py: registrations, admission, liveness), `pushes` (region_pushes.py:
inventories, drains, sync times, region reports), `placement` (placement_pass.py: the pass,
pending reasons), `budget_book` (budget_book.py), `figures_feed` (figures_feed.py),
`stop_book` (stop_book.py) and `gangs` (gangs/tracking.py). The requests are functions over
the service in job_requests.py, worker_requests.py and region_requests.py; the service binds
each to its turn (turns.py).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError, IrisError, StorageError
from iris.base.ids import new_id
from iris.base.resources import Resources
from iris.controller import job_requests, region_requests, scheduler_view, worker_requests
from iris.controller.budget_book import BudgetBook
from iris.controller.bundle_store import BundleStore
from iris.controller.figures_feed import FiguresFeed
from iris.controller.gangs.tracking import CoordinatorConfig, GangTracker
from iris.controller.jobs import event_log, kernel
from iris.controller.jobs import events as ev
from iris.controller.jobs.model import ACTIVE_ATTEMPT
from iris.controller.jobs.spec import JobSpec
from iris.controller.jobs.state import KernelConfig
from iris.controller.jobs.store import JobStore
from iris.controller.launch import RESTORE_ATTEMPT_STRIDE, launch
from iris.controller.placement_pass import PlacementPass
from iris.controller.region_pushes import SYNC_EVERY_S, RegionPushes
from iris.controller.report_check import check_report
from iris.controller.scheduling import scheduler
from iris.controller.service_types import Command, ControllerConfig, JobsFinished
from iris.controller.stop_book import StopBook, stop_row
from iris.controller.turns import PassLater, now_mono, now_wall, turn
from iris.controller.usage import UsageBook
from iris.controller.worker_desk import REGISTRATIONS_PER_S, WorkerDesk
from iris.controller.workers import WorkerInfo, WorkerTable
from iris.logstore.config import LogStoreConfig
from iris.wire import control

_log = logging.getLogger(__name__)
__all__ = ["REGISTRATIONS_PER_S", "SYNC_EVERY_S", "Command", "ControllerConfig",
           "ControllerService", "JobsFinished"]


class ControllerService:
    """The controller's state and its one path of change (`run_many`: check, kernel, pass,
    commit, effects), composed of the components named in the module docstring."""

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
        self.bundles = BundleStore(config.state_dir / "bundles")
        self.commands: list[Command] = []
        self._finished: list[str] = []
        self._ended: list[str] = []  # attempts ended since take_ended: the registry drops
        # their names (their actors are stopped or dead)
        self._broken: str | None = None
        self._turn_now: tuple[float, float] | None = None  # (wall, monotonic): turns.py
        # Placement runs only after something changed (an event, a worker came or went):
        # a pass over 7,500 pending tasks cost 17-77 ms, too much for every 50 ms tick.
        self._placement_due = True
        # A pass asked for with `later` waits for the end of the shell's queue (turns.py).
        self.later = PassLater()
        # Attempts told to stop whose exit is not reported yet (stop_book.py).
        self.stop_book = StopBook(self.store, clock.monotonic())
        # Workers that had attempts (running, or stopping) before a restart are unclaimed
        # until they come back (worker_desk.py).
        self.desk = WorkerDesk(config.worker_dead_after_s, config.max_regions,
                               config.restart_grace_s,
                               set(self.state.by_worker) | set(self.stop_book.by_worker),
                               (r.region for r in config.autoscale), clock.monotonic())
        self.pushes = RegionPushes(config.autoscale, clock.monotonic(), new_id("inc-"))
        self.placement = PlacementPass(clock)
        # The gangs object (gangs/tracking.py). Three tries (about 3.5 s of backoff) before a
        # refused gang goes back to the pass, which shows the regions' reasons and asks again.
        self.gangs = GangTracker(config=CoordinatorConfig(max_attempts=3))
        self.budget_book = BudgetBook(self.store, config.retention_s)
        # The day-trace figures for this cluster (live_figures.py), fed after each commit
        # and on the tick.
        self.figures_feed = FiguresFeed()
        # What attempts use (series, totals) and their named ports (usage.py, issue 31).
        self.usage = UsageBook(self.store.usage_series)

    # ------------------------------------------------------------ the one path of change

    def run_many(self, events: list, schedule: bool = False, later: bool = False,
                 each: list | None = None) -> list:
        """Apply events (then, with `schedule`, the placements they make possible), commit
        everything in one transaction, and only then act. `later`: the pass may wait for
        the end of the shell's queue (`later`, turns.py). `each`: the events are separate
        requests (a batch of submits): one the kernel refuses is left out (it changed
        nothing) and `each` gets, per event, its effects or the error."""
        if self._broken:
            raise IrisError(f"controller halted after a storage failure: {self._broken}")
        now = now_wall(self)
        effects: list = []
        log: list[tuple[float, str, bytes]] = []  # the events that changed state, for replay
        self._handle_all(events, now, effects, log, each)
        self.pushes.touch_effects(effects)
        if log:
            self._placement_due = True
        if schedule and later and self._placement_due and self.later.wait(now_mono(self)):
            schedule = False
        elif schedule:
            self.later.ran()  # this pass is the one wanted
        passed = schedule and self._placement_due
        if passed:
            self._placement_due = False
            placed: list = []
            self._handle_all(self._scheduled(), now, placed, log)
            self.pushes.touch_effects(placed)
            effects += placed
        if effects or passed:
            # Rounds whose gang ended are released; each region's ledger learns its hosts.
            self.gangs.release_ended(self.state)
            self.sync_regions(force=self.gangs.asked())
        if not effects:
            return effects
        persists = [e for e in effects if isinstance(e, ev.Persist)]
        stops = self._stops(effects)
        self._commit(persists, log, [stop_row(w.worker_id, e.attempt_id, e.grace_s, hold)
                                     for e, w, hold in stops.values() if hold is not None])
        self._ended += [a.attempt_id for p in persists for a in p.attempts
                        if a.state not in ACTIVE_ATTEMPT and a.finished_at == p.at]
        self.figures_feed.observe(effects, self.state, now)
        gangs: dict = {}  # each gang's hosts, looked up once for its starts (launch.py)
        for effect in effects:
            self._to_commands(effect, gangs, stops)
        return effects

    def replan(self) -> None:
        """Something placement depends on changed outside the kernel: the next pass runs."""
        self._placement_due = True

    def _scheduled(self) -> list[ev.Event]:
        """The turn's placement pass (scheduling/scheduler.py `schedule`), run here between
        the components: its inputs from `placement`, the gangs it asks for straight to the
        gangs object (a round each), the work it could not place to the autoscaled regions'
        demand."""
        wall, mono = now_wall(self), now_mono(self)
        demoted = self.budget_book.over_budget(self.state, wall, mono)
        asked = self.placement.inputs(
            self.state, self.desk.workers.workers, self.stopping, self.gangs.reserving,
            self.gangs.cooling_reasons(mono),
            held=self.gangs.held_hosts() | set(self.pushes.draining))
        if asked is None:
            self.pushes.route_demand([], self.placement.pending_reasons)
            return []
        fleet, demands, unplaced = asked
        with self.placement.measured():
            plan = scheduler.schedule(
                fleet, demands, reserving_gangs=set(self.gangs.reserving),
                scaling_up=self.pushes.scaling_up(),
                config=scheduler.SchedulerConfig(demoted=demoted), now=wall)
        for request in plan.gang_requests:
            self.gangs.request(request)
        events, work = self.placement.outcome(plan, self.state, fleet, unplaced, demoted)
        self.pushes.route_demand(work, self.placement.pending_reasons)
        return events

    def _stops(self, effects: list) -> dict[str, tuple[ev.StopAttempt, WorkerInfo, Any]]:
        """attempt -> (its stop, its worker, the resources it holds until it exits) for the
        stops these effects send. Stored in the turn's own commit: a crash right after it
        must not leave a requeued task free to start beside its old attempt."""
        out = {}
        for effect in effects:
            if not isinstance(effect, ev.StopAttempt):
                continue
            worker = self.desk.workers.workers.get(effect.worker_id)
            if worker is None:  # gone, and its processes with it: nothing to stop
                continue
            attempt = self.state.attempts.get(effect.attempt_id)
            out[effect.attempt_id] = (effect, worker, scheduler_view.attempt_resources(
                self.state.jobs[attempt.job_id].spec, attempt.accelerator) if attempt else None)
        return out

    def _commit(self, persists: list[ev.Persist], log: list, stops: list = ()) -> None:
        try:
            self.store.apply(persists, log, self.usage.take_rows(), stops)
        except InvalidRequestError:
            # Memory ran ahead of the disk with data the disk refused: go back to what the
            # disk holds (crash-only, without the crash). Only this request fails.
            self.state = self.store.load(KernelConfig(stop_grace_s=self.config.stop_grace_s))
            self._placement_due = True
            self.pushes.touch(self.desk.workers.workers)  # rare: every host may differ
            raise
        except StorageError as exc:
            # The disk failed: memory now claims what the disk does not hold. Stop for good
            # and say so, so that a supervisor restarts the controller from its file.
            self._broken = str(exc)
            _log.critical("controller halted: job store failed: %s", exc)
            if self.config.on_fatal is not None:
                self.config.on_fatal(f"the job store failed: {self._broken}")
            raise

    def _handle_all(self, events: list, now: float, effects: list, log: list,
                    each: list | None = None) -> None:
        for event in events:
            try:
                _, out = kernel.handle(self.state, event, now)
            except IrisError as exc:  # the kernel changed nothing
                if each is None:
                    raise
                each.append(exc)
                continue
            if each is not None:
                each.append(out)
            effects.extend(out)
            if event_log.changed_state(out):
                log.append((now, *event_log.encode(event)))

    def _to_commands(self, effect: Any, gangs: dict, stops: dict) -> None:
        """A kernel effect as what the shell will send: commands to workers, finished jobs."""
        if isinstance(effect, ev.StartAttempt):
            self.queue_start(effect, gangs)
        elif isinstance(effect, ev.StopAttempt) and effect.attempt_id in stops:
            _, worker, hold = stops[effect.attempt_id]  # held until it is gone, stored
            self.queue_stop(worker, effect.attempt_id, effect.grace_s, effect.reason, hold,
                            stored=True)
        elif isinstance(effect, ev.JobFinished):
            self._finished.append(effect.job_id)
            self.placement.forget(effect.job_id)
        elif isinstance(effect, ev.Ignored):
            _log.info("event %s ignored: %s", effect.event_id, effect.reason)

    # ------------------------------------------------------------ stops and starts

    @property
    def stopping(self) -> dict[str, dict[str, Resources]]:
        """worker -> attempt -> resources of attempts told to stop and not gone yet."""
        return self.stop_book.by_worker

    def queue_stop(self, worker: WorkerInfo, attempt_id: str, grace_s: float,
                   reason: str, hold: Resources | None = None, stored: bool = False) -> None:
        """`stored`: the stop is in the store already (committed with the turn)."""
        self.stop_book.stop_sent(worker.worker_id, attempt_id, grace_s, hold, now_mono(self),
                                 stored)
        self.pushes.touch((worker.worker_id,))
        self.commands.append(Command(worker.worker_id, worker.address, control.StopRequest(
            attempt_id=attempt_id, grace_s=grace_s, reason=reason)))

    def queue_start(self, start: ev.StartAttempt, gangs: dict | None = None) -> None:
        worker = self.desk.workers.workers.get(start.worker_id)
        if worker is None:
            return  # lost meanwhile: the WorkerLost event requeues the task
        self.commands.append(Command(worker.worker_id, worker.address, launch(
            self.state, self.desk.workers.workers, start, self.address, self.log_store,
            self.attempt_base, gangs)))

    def stopped(self, attempt_id: str) -> None:
        """An attempt told to stop has exited: its resources are free again."""
        freed = self.stop_book.stopped(attempt_id, now_mono(self))
        self.pushes.touch(freed)
        if freed:
            self._placement_due = True

    def forget_stops(self, worker_id: str) -> None:
        """A worker is gone, and with it whatever it was stopping."""
        self.pushes.touch((worker_id,))
        if self.stop_book.worker_gone(worker_id, now_mono(self)):
            self._placement_due = True  # tasks waiting on those attempts may go now

    # ------------------------------------------------------------ time

    @turn
    def tick(self) -> None:
        now = now_mono(self)
        events: list[ev.Event] = [ev.Tick(new_id("ev-"))]
        lost = self.desk.workers.lost(now)
        events += [ev.WorkerLost(new_id("ev-"), w, "no heartbeat") for w in lost]
        for worker_id in lost:  # its processes are gone with it
            self.forget_stops(worker_id)
        self.pushes.undrain(lost)
        # A gang every region refused is asked for again once its cooling ends.
        self._placement_due = self._placement_due or bool(lost) or self.gangs.cooled(now)
        overdue = self.desk.overdue(now)
        events += [ev.WorkerLost(new_id("ev-"), w, "did not come back after a controller "
                                 "restart") for w in overdue]
        for worker_id in overdue:  # nor did what it was stopping
            self.forget_stops(worker_id)
        self.run_many(events, schedule=True, later=True)
        self.gangs.fire_due(now)  # the coordinator's timers: gathers, resends, backoffs
        self._settle_gangs()
        self.figures_feed.tick(self.state, self.desk.workers.workers.values(), now_wall(self))
        self.sync_regions()  # what changed since the last push, at most every SYNC_EVERY_S

    def sync_regions(self, force: bool = False) -> None:
        """Push each region what changed in its inventory (region_pushes.py)."""
        self.pushes.sync(self.state, self.desk.workers.workers, self.stopping, now_mono(self),
                         force)

    @turn
    def prune(self) -> None:
        self.run_many([ev.Prune(new_id("ev-"), self.config.retention_s)])
        if self.store.logged_count() > event_log.FOLD_AFTER_ROWS:
            try:  # housekeeping: a failed fold rolls back and is tried again next prune
                self.store.compact_event_log(now_wall(self))
            except StorageError as exc:
                _log.warning("folding the event log failed: %s", exc)

    # ------------------------------------------------------------ what others read

    @functools.cached_property  # read for every start command: made and checked once
    def log_store(self) -> LogStoreConfig:
        return self.config.log_store or LogStoreConfig(
            kind="local", root=str(self.config.state_dir / "logs"))

    @property
    def workers(self) -> WorkerTable:
        return self.desk.workers

    @property
    def draining(self) -> dict[str, str]:
        return self.pushes.draining

    @property
    def figures(self) -> Any:
        return self.figures_feed.figures

    @property
    def fleet_view(self) -> Any:
        return self.placement.fleet_view

    def catalogue(self) -> Any:
        """What a request must fit at admission (worker_desk.py)."""
        return self.desk.catalogue(self.config.offers, self.config.accept_unfit)

    def parent_spec(self, parent: str | None) -> JobSpec | None:
        job = self.state.jobs.get(parent) if parent is not None else None
        return job.spec if job else None

    def report_interval(self) -> float:
        """Seconds between reports this controller asks of its workers now."""
        return self.desk.report_interval(now_mono(self))

    def take_effects(self, gang_frames: bool = True) -> list:
        """Everything the turns since the last call decided for the world outside, in the
        order the shell acts on it: region inventories, then the gang frames for each region
        (a round relies on its inventory; without `gang_frames` they wait to go out with a
        later turn's, as the actor does until the end of its queue), commands to workers,
        then the jobs that finished."""
        effects: list = self.pushes.take_outbox()
        effects += self.gangs.take_sends(now_mono(self), flush=gang_frames)
        effects += self.take_commands()
        finished, self._finished = self._finished, []
        if finished:
            effects.append(JobsFinished(tuple(finished)))
        return effects

    def take_ended(self) -> list[str]:
        """The attempts that ended since the last call (their registry names must go)."""
        ended, self._ended = self._ended, []
        return ended

    def take_commands(self) -> list[Command]:
        """Only the commands to workers (what tests of the service look at)."""
        commands, self.commands = self.commands, []
        return commands

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------ requests, on the turn

    # Each request is a function of the service in the module of its origin, bound here to
    # its turn (turns.py: one `now` for all it decides); reads need no turn.
    submit = turn(job_requests.submit)
    submits = turn(job_requests.submits)  # many submissions: one turn and transaction
    dry_run = turn(job_requests.dry_run)
    kill = turn(job_requests.kill)
    status = job_requests.status
    list_jobs = job_requests.list_jobs
    results = job_requests.results
    list_workers = turn(job_requests.list_workers)
    snapshot = turn(job_requests.snapshot)
    register_worker = turn(worker_requests.register_worker)
    reports = turn(worker_requests.reports)
    worker_gone = turn(worker_requests.worker_gone)
    set_region_reports = turn(region_requests.set_region_reports)
    forget_region = turn(region_requests.forget_region)
    drain_hosts = turn(region_requests.drain_hosts)
    undrain_hosts = turn(region_requests.undrain_hosts)
    hosts_gone = turn(region_requests.hosts_gone)
    inventory_push_failed = turn(region_requests.inventory_push_failed)

    @turn
    def schedule_now(self) -> None:
        """A scheduling pass, if anything changed since the last one."""
        self.run_many([], schedule=True)

    def job_state(self, job_id: str) -> str | None:
        job = self.state.jobs.get(job_id)
        return job.state.value if job else None

    def report(self, worker_id: Any, updates: Any, stats: Any = None,
               running: Any = None, usage: Any = ()) -> dict:
        """One worker's report (worker_requests.reports)."""
        [answer] = self.reports([check_report(worker_id, updates, stats, running, usage)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    def drop_absent_stats(self) -> None:
        """Forget the figures of workers no longer registered (reclaim.py)."""
        self.desk.drop_absent_stats()

    @turn
    def gang_replies(self, region: str, replies: Any) -> None:
        """A region's typed replies to its gang requests, settled in this turn."""
        self.gangs.replied(region, replies, now_mono(self))
        self._settle_gangs()

    @turn
    def gang_region_down(self, region: str, why: Any) -> None:
        self.gangs.region_down(region, why, now_mono(self))
        self._settle_gangs()

    def _settle_gangs(self) -> None:
        """The gangs object's outcomes as events, then ONE pass, at the end of the queue
        (a pass per gang capped gangs per second)."""
        settled = self.gangs.settle(self.state, self.desk.workers.workers, self.stopping,
                                    now_mono(self))
        if settled is not None:
            for job_id, reason in settled[1].items():
                self.placement.note_reason(job_id, reason)
            self.replan()
            self.run_many(settled[0], schedule=True, later=True)

    @turn
    def budget_set(self, raw: dict) -> dict:
        """Set (or with `clear`, remove) a user's or group's budget; operators only."""
        answer = self.budget_book.put(raw)
        self._placement_due = True  # demotions may have changed
        return answer

    @turn
    def budget_get(self, subject: str) -> dict:
        return self.budget_book.get(subject, self.state, now_wall(self), now_mono(self))

    @turn
    def budget_list(self) -> dict:
        return self.budget_book.table(self.state, now_wall(self), now_mono(self))
