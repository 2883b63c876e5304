"""The Controller actor: a thin shell around ControllerService, served under CONTROLLER_KEY.

Not the decisions (service.py, jobs/kernel.py). Sync methods run one at a time on the
actor's thread, which is the controller's single mailbox: the service is only ever touched
there. `wait` is async so that thousands of clients can wait for jobs without holding that
thread; it is woken from the actor thread through the node's loop. Gangs are the service's
(gangs/tracking.py); this actor only carries their requests to the Region actors
(regions/region.py's RegionCarrier) and its commands to workers, and the regions' replies come back as messages into this mailbox and are handed to
the service as they are. The tick's periodic work is upkeep.py's. Submits that arrive
together are one turn (batching.py); a scheduling pass asked for while more waits in the
mailbox runs when it runs dry (`_after`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable
from typing import Any

from iris.actors import Node, actor, tokens
from iris.actors.batching import batched
from iris.actors.hosting import requires
from iris.actors.keys import CONTROLLER_KEY, region_key, worker_key
from iris.base.errors import ConfigError, InvalidRequestError, IrisError, NotFoundError
from iris.controller.credentials import Credentials, controller_token, grant_roles, load_secret
from iris.controller.inspect import locate, summary
from iris.controller.job_requests import check_submission
from iris.controller.jobs.model import TERMINAL_JOB
from iris.controller.launch import with_proof
from iris.controller.preemption_notices import apply_notice
from iris.controller.reclaim import RegionReclaim
from iris.controller.regions.region import STOP_ALL_SLICES_S, RegionCarrier
from iris.controller.regions.remote import check_region_actors
from iris.controller.report_check import check_report
from iris.controller.report_fronts import (
    front_batch,
    point_at_fronts,
    split_answers,
    start_fronts,
)
from iris.controller.service import ControllerConfig, ControllerService
from iris.controller.service_types import Command, JobsFinished
from iris.controller.upkeep import Upkeep
from iris.controller.waiters import JobWaiters
from iris.wire import control, schema

_log = logging.getLogger(__name__)


@actor
class Controller:
    # 50 ms: timeouts, lost workers and scheduling of freed capacity are noticed promptly;
    # each tick that finds nothing to do costs a few microseconds.
    tick_interval_s = 0.05

    def __init__(self, config: ControllerConfig, node: Node,
                 withdraw_names: Callable[[list[str]], None] | None = None):
        self._node = node
        # The registry beside it (registry.withdrawer): ended attempts' names go at once.
        self._withdraw_names = withdraw_names
        # Region actors other nodes serve (regions/remote.py): a bad entry stops the start.
        remote = check_region_actors(config.region_actors, {r.region for r in config.autoscale})
        self._svc = ControllerService(config, node.address, node.clock)
        grant_roles(node.grant, config.state_dir)  # the cluster, admin and controller tokens
        # Report fronts (report_fronts.py) honour the workers' credentials too: mirrored.
        self._fronts = start_fronts(config, node)
        grants = node if self._fronts is None else self._fronts
        self._creds = Credentials(config.state_dir, grants.grant, grants.revoke,
                                  now=node.clock.monotonic())
        self._waiters = JobWaiters(self._svc.job_state, _TERMINAL)  # on the loop thread only
        self.report_batches = self.reports_batched = 0  # for the snapshot: batch sizes
        # Passes asked for while more requests wait run at the end of the queue (_after).
        self._svc.later.queued = lambda: node.backlog(CONTROLLER_KEY) > 0
        # One Region actor per region the workers name, served by this node unless another
        # serves it (`remote`, called with the controller's token): the gang frames and
        # inventories the service decides are carried onto their turns, their replies come
        # back as messages in this mailbox.
        self._scaling = {r.region: r for r in config.autoscale}
        self._secret = load_secret(config.state_dir)  # attempts' proofs (_command)
        self._regions = RegionCarrier(node, self._post, self._svc, regions=remote,
                                      auth=controller_token(self._secret),
                                      scaling=self._scaling)
        for region in sorted(self._scaling):  # they may grow before any worker exists
            self._regions.ensure_region(region)
        # Regions no host names any more are stopped: after twice the silence that loses one.
        self._upkeep = Upkeep(self._svc, self._regions, self._creds,
                              RegionReclaim(2 * config.worker_dead_after_s),
                              {**self._scaling, **remote},
                              lambda region: node.unhost(region_key(region)),
                              node.clock.monotonic(), node.call_in_loop)
        self._checkpoints = None
        if config.checkpoints is not None:  # google-cloud-storage is imported only then
            from iris.controller.checkpoint.desk import CheckpointDesk

            self._checkpoints = CheckpointDesk(config.checkpoints, config.state_dir, node,
                                               on_fenced=config.on_fatal)

    # ------------------------------------------------------------ jobs

    @batched("_submits", check=check_submission)
    def submit(self, raw: dict) -> dict:
        """Over the wire, submits that arrive together are decoded on the loop thread and
        handled in one turn (`_submits`)."""
        return self._after(self._svc.submit(raw))

    def _submits(self, raws: list) -> list:
        """A batch of submissions (batching.py): one turn, one transaction (one fsync), and
        one pass, which waits for the end of the queue while more requests wait there
        (a pass per submit cost ~40 ms each at 150 pending gangs). Answered after the
        commit."""
        return self._after(self._svc.submits(raws))

    def dry_run(self, raw: dict) -> dict:
        return self._svc.dry_run(raw)

    def kill(self, job_id: str, reason: str = "killed by user") -> dict:
        schema.text(job_id, "job_id")
        schema.text(reason, "reason", max_len=4096)
        return self._after(self._svc.kill(job_id, reason))

    def kill_prefix(self, prefix: str) -> list[str]:
        schema.text(prefix, "prefix")
        doomed = [j["job_id"] for j in self._svc.list_jobs(prefix, include_finished=False)]
        for job_id in doomed:
            if self._svc.job_state(job_id) not in _TERMINAL:
                self._svc.kill(job_id, f"killed by prefix {prefix}")
        return self._after(doomed)

    def status(self, job_id: str) -> dict:
        schema.text(job_id, "job_id")
        return self._svc.status(job_id)

    def list_jobs(self, prefix: str | None = None, include_finished: bool = True) -> list[dict]:
        schema.text(prefix, "prefix", optional=True)
        schema.flag(include_finished, "include_finished")
        return self._svc.list_jobs(prefix, include_finished)

    # ------------------------------------------------------------ budgets

    @requires(tokens.ADMIN)
    def budget_set(self, raw: dict) -> dict:
        """Set or clear a user's or group's budget (operators only: the admin token)."""
        return self._after(self._svc.budget_set(raw))

    def budget_get(self, subject: str) -> dict:
        schema.text(subject, "subject")
        return self._svc.budget_get(subject)

    def budget_list(self) -> dict:
        """Budgets and every user's accelerator-hours (anyone may read them)."""
        return self._svc.budget_list()

    def results(self, job_id: str) -> dict[int, bytes]:
        schema.text(job_id, "job_id")
        return self._svc.results(job_id)

    def has_bundle(self, digest: str) -> bool:
        _digest(digest)
        return self._svc.bundles.has(digest)

    def put_bundle(self, digest: str, data: bytes) -> None:
        _digest(digest)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidRequestError(f"data: expected bytes, got {type(data).__name__}", "data")
        self._svc.bundles.put(digest, data)

    async def get_bundle(self, digest: str) -> bytes:
        """Read on the loop, not the actor thread: a big file must not stall scheduling."""
        _digest(digest)
        return await asyncio.get_running_loop().run_in_executor(None, self._svc.bundles.get,
                                                                digest)

    def log_config(self) -> dict:
        """Where task logs are, so clients read them from the store, not from workers."""
        return dataclasses.asdict(self._svc.log_store)

    async def wait(self, job_id: str, timeout_s: float | None = None) -> str:
        """The job's state once it has ended, or its current state after `timeout_s`."""
        schema.text(job_id, "job_id")
        schema.number(timeout_s, "timeout_s", optional=True, min_value=0.0, max_value=86400.0)
        return await self._waiters.wait(job_id, timeout_s)

    # ------------------------------------------------------------ checkpoints (checkpoint/)

    async def checkpoint(self, timeout_s: float = 600.0) -> dict:
        """Take a checkpoint now (`iris cluster checkpoint`): its name, size, job counts."""
        schema.number(timeout_s, "timeout_s", min_value=0.0, max_value=86400.0)
        return await self._checkpoint_desk().take(timeout_s)

    async def wait_durable(self, timeout_s: float = 600.0) -> dict:
        """Return once everything acknowledged before this call is in a checkpoint in GCS
        (`iris.submit(..., durable=True)`); concurrent callers share one checkpoint."""
        schema.number(timeout_s, "timeout_s", min_value=0.0, max_value=86400.0)
        return await self._checkpoint_desk().take(timeout_s)

    async def checkpoints(self) -> dict:
        """The checkpoints in GCS (`iris cluster checkpoints`), oldest first, and the policy."""
        return await self._checkpoint_desk().listing()

    def restored(self) -> dict | None:
        """The newest restore from a checkpoint this state went through (checkpoint name,
        taken_at, and `at`: when it was restored), or None. Clients holding a job this
        controller does not know resubmit it only if it was restored after they submitted."""
        rows = [r for r in self._svc.store.lineage() if r["what"] == "restored"]
        return rows[-1] if rows else None

    def _checkpoint_desk(self) -> Any:
        if self._checkpoints is None:
            raise ConfigError("this controller takes no checkpoints: set "
                              "storage.snapshot_bucket in its cluster config (--config)")
        return self._checkpoints

    # ------------------------------------------------------------ workers

    @requires(tokens.MEMBER)
    def join(self, worker_id: str, proof: bytes | None = None) -> dict:
        """A new host, holding the cluster token, gets its own credential and the token
        the controller will present on its commands (credentials.py). Refused for an id
        an operator revoked, and for one a registered worker holds (until it is lost) or one
        held since before a restart (unless `proof` is the credential it was issued: its
        holder joining again)."""
        return self._creds.join(worker_id, self._worker(worker_id), self._node.clock.monotonic(),
                                proof)

    @requires(tokens.WORKER)  # as itself: the id its credential names (credentials.py)
    def register_worker(self, worker_id: str, address: str, attributes: dict,
                        running: list[str], updates: list[dict] = ()) -> list[dict]:
        return self._after(self._svc.register_worker(worker_id, address, attributes, running,
                                                     list(updates)))

    @requires(tokens.WORKER)
    # late=True: a report that waited past its 5 s deadline (a controller behind) is still
    # applied: refusing it made the worker send it again, into the same queue, and jobs
    # whose exit was in it stayed running (bench.fleet at 10,000 hosts under load).
    # key: a worker's report carries every update not yet acknowledged, so its newest
    # says all an older one still waiting did; a controller behind handles one per worker.
    @batched("_reports", check=check_report, late=True, key=lambda r: r.worker_id)
    def report(self, worker_id: str, updates: list[dict], stats: dict | None = None,
               running: list[str] | None = None, usage: list[dict] = ()) -> dict:
        """A worker's heartbeat and updates (and its attempts' usage readings). Over the
        wire, reports that arrive together are checked on the loop thread and handled in
        one turn (`_reports`); the answer carries `interval_s`, when to report next
        (workers.report_interval_s)."""
        return self._after(self._svc.report(worker_id, updates, stats, running, usage))

    def _reports(self, msgs: list) -> list:
        """A batch of checked reports (batching.py): one turn, one transaction, one pass.
        With report fronts, each answer says where to report next (report_fronts.py)."""
        self.reports_batched += len(msgs)
        self.report_batches += 1
        answers = self._after(self._svc.reports(msgs))
        return answers if self._fronts is None else point_at_fronts(self._fronts, msgs, answers)

    @requires(tokens.CONTROLLER)  # a front this controller started (report_front.py)
    @batched("_front_batches", check=front_batch, late=True)
    def front_reports(self, index: int, items: list) -> list:
        """A front's batch of reports, checked there as `report` checks them here; the
        batches of all fronts waiting are one turn (`_front_batches`)."""
        return self._front_batches([front_batch(index, items)])[0]

    def _front_batches(self, batches: list) -> list:
        msgs = [m for batch in batches for m in batch]
        self.reports_batched += len(msgs)
        self.report_batches += 1
        return split_answers(batches, self._after(self._svc.reports(msgs)))

    @requires(tokens.CONTROLLER)
    def front_hello(self, index: int, address: str, pid: int) -> bool:
        """A report front is up at `address` (report_fronts.py); False: not one of ours."""
        if self._fronts is None:
            return False
        return self._fronts.hello(index, address, pid)

    @requires(tokens.WORKER)
    def goodbye(self, worker_id: str, address: str) -> None:
        """A worker stopped, its attempts with it: requeue them now. Its credential ends."""
        self._after(self._svc.worker_gone(worker_id, address, "its worker stopped"))
        self._creds.ended(worker_id, address, self._worker(worker_id))

    @requires(tokens.WORKER)
    def worker_crashed(self, worker_id: str, address: str) -> None:
        """From a worker's watchdog: the worker process died and its attempts are stopped."""
        self._after(self._svc.worker_gone(worker_id, address, "its worker process died (the "
                                          "watchdog stopped its attempts)"))
        self._creds.ended(worker_id, address, self._worker(worker_id))

    def _worker(self, worker_id: str) -> Any:
        """The worker registered under `worker_id`; None for none (or an id that is not a
        string: the caller's own check names that)."""
        return self._svc.workers.workers.get(worker_id) if type(worker_id) is str else None

    @requires(tokens.WORKER)
    def preemption_notice(self, worker_id: str, address: str, reason: str,
                          time_left_s: float) -> dict:
        """The cloud will take this worker's machine: requeue its work now (see
        preemption_notices.py)."""
        return self._after(apply_notice(self._svc, worker_id, address, reason, time_left_s))

    def list_workers(self) -> list[dict]:
        return self._svc.list_workers()

    # ------------------------------------------------------------ looking inside (inspect.py)

    def job_summary(self, job_id: str) -> dict:
        """Per task and attempt: queue and run time, how it ended, CPU, peak memory against
        the request, chip-hours, retries; the job's totals and events (`iris job summary`)."""
        return summary(self._svc, job_id)

    @requires()  # the inspector actor (inspector.py), in process
    def inspect_target(self, raw: dict) -> dict:
        """The live attempt and worker behind a task; an allowed exec is noted first. With
        `auth`, the command token the inspector presents to that worker."""
        target = locate(self._svc, raw)
        return {**target, "auth": self._command_token(target["worker_id"])}

    @requires(tokens.ADMIN)
    def drain_worker(self, worker_id: str) -> dict:
        """An operator's `iris worker drain`: the worker is told to leave as on SIGTERM (it
        gives notice, hands its attempts back, says goodbye and stops). Its attempts now."""
        schema.text(worker_id, "worker_id", max_len=256)
        info = self._worker(worker_id)
        if info is None:
            raise NotFoundError(f"worker_id: no worker {worker_id!r} is registered "
                                "(iris worker list names them)")
        self._node.call(info.address, worker_key(worker_id), "drain",
                        ("drained by an operator (iris worker drain)",), oneway=True,
                        auth=self._command_token(worker_id))
        return {"worker_id": worker_id, "address": info.address,
                "attempts": sorted(self._svc.state.by_worker.get(worker_id, ()))}

    @requires(tokens.ADMIN)
    def revoke_worker(self, worker_id: str) -> dict:
        """An operator's `iris worker revoke`: the worker's credential is revoked (its next
        call is refused), its id may not join again, and its attempts are requeued now
        (its lease lapses, so its watchdog stops them there). Other workers are untouched."""
        info = self._worker(worker_id)
        was = self._creds.revoke_by_operator(worker_id, info is not None)
        attempts = sorted(self._svc.state.by_worker.get(worker_id, ()))
        if info is not None:
            self._after(self._svc.worker_gone(worker_id, info.address,
                                              "its worker was revoked by an operator"))
        return {"worker_id": worker_id, "attempts": attempts, "was": was}

    def _command_token(self, worker_id: str) -> bytes | None:
        """What this controller presents on its commands to that worker (`_command`)."""
        return self._creds.command_token(worker_id)

    # ------------------------------------------------------------ from the Region actors

    @requires()  # the controller's own Region actors, in process
    def drain_hosts(self, hosts: dict) -> None:
        """A Region will delete these hosts' idle slice once they take no more work."""
        self._after(self._svc.drain_hosts(hosts))

    @requires()  # the controller's own Region actors, in process
    def undrain_hosts(self, hosts: list) -> None:
        self._after(self._svc.undrain_hosts(hosts))

    @requires()  # the controller's own Region actors, in process
    def hosts_gone(self, gone: dict) -> None:
        """A Region deleted slices: their workers are lost now (host id -> why)."""
        self._after(self._svc.hosts_gone(gone))

    async def slices(self) -> list[dict]:
        """Every autoscaled region's slices, as its provider lists them (Region.slices): the
        slices of providers that live in this process too, which nothing else can list."""
        return [row for rows in await self._regions.each_region("slices", (), 30.0) for row in rows]

    @requires(tokens.ADMIN)
    async def stop_slices(self, timeout_s: float = STOP_ALL_SLICES_S) -> list[dict]:
        """`iris cluster stop`: every region stops scaling and deletes every slice of its
        provider (Region.stop_slices); what each deleted and what it could not."""
        schema.number(timeout_s, "timeout_s", min_value=1.0, max_value=86400.0)
        return await self._regions.each_region("stop_slices", (False,), timeout_s)

    def regions(self) -> dict[str, str]:
        """Region name -> address of the node serving its Region actor."""
        return {r: target if isinstance(target, str) else self._node.address
                for r, target in sorted(self._regions.regions.items())}

    # ------------------------------------------------------------ acting, on this turn

    def _post(self, fn: Any, *args: Any) -> None:
        """A message in this actor's mailbox: a region's reply (from its thread), or the
        pass left for the end of a burst of submits."""
        self._node.post_to(CONTROLLER_KEY, self._turn, fn, args)

    def _turn(self, fn: Any, args: tuple) -> None:
        try:
            fn(*args)
        except IrisError as exc:  # a halted store: the request that follows says so
            _log.error("%s: %s", getattr(fn, "__name__", fn), exc)
        self._after(None)

    def _after(self, answer: Any, gang_frames: bool = False) -> Any:
        """Act on what the service decided (one effect list: region inventories and gang
        requests, carried by RegionCarrier; commands to workers; finished jobs) until nothing
        is left; then answer. The gang requests go at the end of the queue (or with
        `gang_frames`, on the tick), so under load every reply waiting in the mailbox is
        handled first and a region's requests go out together, one turn of it each."""
        while True:
            if self._svc.later.wanted and self._node.backlog(CONTROLLER_KEY) == 0:
                self._svc.schedule_now()  # the end of the queue: the pass left for it
            last = gang_frames or self._node.backlog(CONTROLLER_KEY) == 0
            effects = self._svc.take_effects(gang_frames=last)
            ended = self._svc.take_ended()
            if ended and self._withdraw_names is not None:  # before the stops go out
                self._withdraw_names(ended)
            if not effects:
                return answer
            for effect in effects:
                if isinstance(effect, Command):
                    self._command(effect)
                elif isinstance(effect, JobsFinished):
                    self._node.call_in_loop(self._waiters.wake, list(effect.job_ids))
                else:  # region inventories and gang requests, in order
                    self._regions.carry(effect)

    def _command(self, command: Command) -> None:
        """A start or stop to a worker, typed until here, with that worker's token; a start
        with its attempt's proof (launch.with_proof)."""
        message = command.message
        if isinstance(message, control.Launch):
            message = with_proof(message, self._secret)
        self._node.call(command.address, worker_key(command.worker_id), command.method,
                        (control.encode(message),), timeout_s=30.0,
                        auth=self._command_token(command.worker_id)
                        ).add_done_callback(_log_failure)

    # ------------------------------------------------------------ hooks

    async def snapshot(self) -> dict:
        """Live state: workers, pending reasons, counts; at most 0.5 s old (2 s at 10,000
        workers), built on the tick while someone reads it (upkeep.py).

        Runs on the node's loop and returns an immutable, already-built dict, so dashboards
        and metrics never hold (or slow) the controller's own thread.
        """
        return await self._upkeep.read(self._node.clock.monotonic())

    async def figures(self, hours: float = 24.0) -> dict:
        """The live figures (live_figures.py): now's summary and the series of the last
        `hours` (1, 6 or 24). Built on the tick when a sample lands, returned from the loop."""
        return await self._upkeep.figures(hours, self._node.clock.monotonic())

    def state_dir(self) -> str:
        return str(self._svc.config.state_dir)

    def on_tick(self) -> None:
        self._svc.tick()  # the coordinator's timers fire there too
        if self._fronts is not None:
            self._fronts.tick(self._node.clock.monotonic())  # a dead front is restarted
        self._upkeep.tick(self._node.clock.monotonic(), {
            "batches": self.report_batches, "reports": self.reports_batched,
            "interval_s": self._svc.report_interval(),
            **({} if self._fronts is None else {"fronts": self._fronts.counts()})})
        self._after(None, gang_frames=True)  # what turns left for the end of a busy queue

    def on_stop(self) -> None:
        if self._fronts is not None:
            self._fronts.close()
        self._regions.close()
        self._creds.close()
        if self._checkpoints is not None:
            self._checkpoints.stop()
        self._svc.close()


_TERMINAL = frozenset(s.value for s in TERMINAL_JOB)


def _digest(digest: object) -> None:
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise InvalidRequestError(f"digest: expected a sha256 hex digest, got {digest!r:.80}",
                                  "digest")


def _log_failure(fut: Any) -> None:
    error = fut.exception()
    if error is not None:  # the worker's heartbeat and reconcile repair what a lost call missed
        _log.warning("command to worker failed: %s", error)
