"""The Worker actor: one per host; runs the controller's attempts through an AttemptRunner.

Not the process machinery (runner.py and below) and not the decisions (attempts.py). An
actor in the STYLE sense: its state (the book of attempts, the unacknowledged updates, the
log shippers) is touched only on its own turn, with no lock. `start_attempt` and
`stop_attempt` are events for the kernel `attempts.handle`; its effects hand the blocking
work (building an environment can take minutes, a stop up to the grace period) to an
executor (attempt_work.py), whose findings come back as messages through an Inbox drained on
the actor's turn: at its next tick, or at once (an in-process cast) when an attempt ended.
State changes are sent to the controller from `on_tick`, at most TICK_S after they happen,
in one `report` call that also serves as the heartbeat; an update is dropped only once the
controller acknowledged it, so a controller restart loses none. Logs go to the log store as
the task prints.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iris.actors import Node, actor, tokens
from iris.actors.hosting import requires
from iris.actors.keys import worker_inspect_key, worker_key
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import IrisError, OverloadedError, PermissionDeniedError
from iris.base.resources import Resources
from iris.wire import control, schema
from iris.wire.fencing import REPORT_INTERVAL_MAX_S
from iris.worker import attempts, cgroups, credential, lease
from iris.worker.attempt_work import AttemptWork, SinkKey, sink_key
from iris.worker.inbox import Inbox
from iris.worker.inspector import WorkerInspector
from iris.worker.process import AttemptProcess
from iris.worker.records import proc_start_ticks
from iris.worker.report_route import ReportRoute
from iris.worker.runner import AttemptRunner, RunnerConfig
from iris.worker.usage_sampler import SamplerConfig, UsageSampler, samples_for
from iris.worker.watchdog import ensure_running, wait_gone

if TYPE_CHECKING:  # made by AttemptWork at an attempt's start
    from iris.logstore.shipper import LogShipper
    from iris.logstore.sinks import LogSink

_log = logging.getLogger(__name__)
# Heartbeat period until the controller asks for another (each report's answer carries
# `interval_s`: a large fleet reports less often), never past REPORT_INTERVAL_MAX_S, which
# the lease outlasts (wire/fencing.py).
HEARTBEAT_S = 1.0
# Threads for starts and stops in flight. Each blocks for a whole build (minutes, on a cold
# uv cache) or a grace period (10 s), and a stop must never queue behind builds: a host runs
# at most as many attempts as its cpus admit, and 128 covers that with stops to spare.
# Threads are made only when needed and reused after (before: a new thread per operation).
_EXECUTOR_THREADS = 128
# Reports wait for a machine-end notice this long at most (Slurm: one squeue, then one call
# to the controller, normally well under a second): past it the exits go out anyway.
_NOTICE_HOLD_S = 5.0
# A clean stop waits this long for its watchdog to exit (it does on its first look once the
# lease is gone: its start-up, seconds at most on a loaded host).
_WATCHDOG_GONE_S = 10.0


@actor
class Worker:
    # Reports wait at most this long past their interval, and so do a phase reached and the
    # kernel's timeouts (seconds each). What must go at once does not wait for a tick: an exit
    # or a failed start wakes the actor (urgent), and the goodbye's steps follow the exits
    # they wait for (`deliver`). A tiny task's "running" often rides with its "exited". At
    # 0.02 s an idle worker spent ~8 ms/s of CPU, at 0.1 s ~4 (tests/README.md, round 5).
    tick_interval_s = 0.1

    def __init__(self, worker_id: str, controller_address: str, controller_key: str,
                 attributes: dict[str, str], root: Path, node: Node,
                 advertised: Resources, grace_s: float = 10.0, token: bytes | None = None,
                 task_env: tuple[tuple[str, str], ...] = (), gpu_devices: tuple[str, ...] = (),
                 warm: bool = False, on_drain: Callable[[str], None] | None = None,
                 env_root: Path | None = None):
        self.worker_id = worker_id
        self._on_drain = on_drain  # asks this worker's process to stop (main.py)
        # While leaving (main.py's goodbye): (done, when to stop attempts here, when to give
        # up); None otherwise. `_left`: the goodbye went, nothing is registered any more.
        self._leaving: tuple[threading.Event, float, float] | None = None
        self._left = False
        self._node = node
        self._controller = (controller_address, controller_key)
        self._key = worker_key(worker_id)
        self._attributes = attributes
        config = RunnerConfig(root=root, grace_s=grace_s, gpu_devices=gpu_devices,
                              env_root=env_root)
        config = dataclasses.replace(config, base_env=config.base_env + task_env)
        self._runner = AttemptRunner(config, advertised,
                                     cgroups=cgroups.detect(), fetch_bundle=self._fetch_bundle)
        # Fencing (lease.py): the lease is renewed by every acknowledged report, and a
        # watchdog process that outlives this one stops the attempts when it lapses.
        current = lease.read(root)
        self._book = attempts.Book(lease_until=current.expires_at if current else None)
        self._registered = False
        self._last_report = 0.0
        self._interval = HEARTBEAT_S  # as the controller last asked
        self._route = ReportRoute(node, worker_id, self._controller)  # a front, or here
        self._sinks: dict[SinkKey, LogSink] = {}
        self._shippers: dict[str, LogShipper] = {}  # attempt id -> its live log shipper
        self._dropped_lines_closed = 0  # by shippers already closed, for a lifetime counter
        # The cluster token (tokens.py) buys this worker its own credential (`join`), with
        # which it speaks as itself, and the command token the controller presents on its
        # commands here (credential.py); kept in `root` across restarts of this process.
        # The token is found at the first join when not handed in.
        self._token = token
        self._cred = credential.read(root, worker_id, controller_address)
        self._rejoin = credential.Rejoin.start(root, worker_id, self._cred)
        if self._cred is not None:
            node.grant(self._cred.command_token, tokens.CONTROLLER)
        self._root = root
        self._ending_since: float | None = None  # set by machine_ending (any thread)
        self._warm = warm
        self._me = (os.getpid(), proc_start_ticks(os.getpid()) or 0)
        self._inbox = Inbox(self._wake)
        self._executor = ThreadPoolExecutor(_EXECUTOR_THREADS, f"iris-worker-{worker_id}")
        # What each attempt uses, read on a thread of its own (usage_sampler.py, issue 31).
        self._sampler = UsageSampler(self._runner.live, SamplerConfig.from_env())
        self._work = AttemptWork(self._runner, self._inbox, self._on_event,
                                 self._on_shipping, self._on_shipper_closed, self._sampler)

    # ------------------------------------------------------------ called by the controller

    @requires(tokens.CONTROLLER)
    def start_attempt(self, launch: dict) -> bool:
        decoded = control.decode(control.Launch, launch)  # checked whole before any change
        self._on_event(attempts.Start(decoded))
        return True  # a re-sent start (reconcile) of an attempt held: already ours

    @requires(tokens.CONTROLLER)
    def stop_attempt(self, body: dict) -> bool:
        stop = control.decode(control.StopRequest, body)
        if stop.attempt_id not in self._book.held:
            return False
        shipper = self._shippers.get(stop.attempt_id)
        if shipper is not None:  # the task's log says why it stops (a preemption notice, a kill)
            grace = f"{stop.grace_s:g} s" if stop.grace_s is not None else "the default grace"
            shipper.write("stderr", f"[iris] stopping ({grace}): {stop.reason}\n")
        self._on_event(attempts.Stop(stop.attempt_id, stop.grace_s))
        return True

    @requires(tokens.CONTROLLER)
    def drain(self, reason: str) -> bool:
        """Leave the cluster as on SIGTERM (an operator's `iris worker drain`, through the
        controller): hand the attempts back, say goodbye, stop the process."""
        schema.text(reason, "reason", max_len=1024)
        if self._on_drain is None:
            return False
        self._on_drain(reason)
        return True

    @requires()  # this worker's own process (main.py posts it to this actor's turn)
    def leave(self, done: threading.Event, grace_s: float, told: bool) -> None:
        """The goodbye (main.py, on this actor's turn): once no attempt is held and every
        update is acknowledged, `goodbye`, then `done`. `told`: the controller has the notice
        and stops the attempts itself; else (or if its stops never come) they stop here."""
        now = self._node.clock.monotonic()
        self._leaving = (done, now + (grace_s + 2.0 if told else 0.0), now + 2 * grace_s + 5.0)
        if not told:
            self._registered = False  # unreachable: nothing to wait for but the attempts
        self._leave_step()

    @requires()  # cast by this worker to itself
    def deliver(self) -> None:
        """Run what the executor sent, and report at once what ended (cast by the worker to
        itself when an attempt ends: the capacity it frees is wanted now)."""
        self._inbox.drain()
        if self._registered and self._book.updates and not self._holding_reports():
            self._last_report = self._node.clock.monotonic()
            self._report()
        if self._leaving is not None:  # the exits it waited for may have just gone
            self._leave_step()

    def status(self) -> dict:
        return {"worker_id": self.worker_id, "attempts": sorted(self._book.held),
                "free": self._runner.free()}

    # ------------------------------------------------------------ hooks

    def on_start(self) -> None:
        self._runner.recover(adopt=False)  # a previous life's attempts: killed, not run twice
        self._node.host(worker_inspect_key(self.worker_id), WorkerInspector,
                        (self._process_of, self._root / "inspect"))
        if self._warm:  # off this turn: registration must not wait for it
            self._executor.submit(self._runner.warm)

    def _process_of(self, attempt_id: str) -> AttemptProcess | None:
        """The running process of an attempt this worker holds (for its inspector)."""
        held = self._book.held.get(attempt_id)
        return self._runner.process(held.task_id, held.launch.attempt_number) if held else None

    def on_tick(self) -> None:
        self._inbox.drain()
        if self._book.held:  # the kernel's timeouts are held attempts' (attempts._tick)
            self._on_event(attempts.Tick())
        now = self._node.clock.monotonic()
        if self._leaving is not None:
            self._leave_step()
        if not self._registered:
            if self._leaving is not None or self._left:
                return  # going: no new registration
            if now - self._last_report >= HEARTBEAT_S or not self._last_report:
                self._last_report = now
                self._register()
            return
        if (self._book.updates or now - self._last_report >= self._interval) and \
                not self._holding_reports():
            self._last_report = now
            self._report()

    def on_stop(self) -> None:
        started = SYSTEM_CLOCK.monotonic()
        self._sampler.stop()
        # The goodbye went before the node stopped (`leave`); what is left is stopped here.
        self._executor.shutdown(wait=False, cancel_futures=True)  # starts not begun never will
        self._runner.close()  # every attempt stopped (its grace each): nothing left to fence
        (self._root / lease.LEASE_NAME).unlink(missing_ok=True)  # the watchdog may go
        if wait_gone(self._root, _WATCHDOG_GONE_S):
            _log.info("stop: attempts stopped, watchdog gone (%.1f s)",
                      SYSTEM_CLOCK.monotonic() - started)
        else:
            _log.warning("worker %s: its watchdog is still running %.0f s after the stop",
                         self.worker_id, _WATCHDOG_GONE_S)

    def _leave_step(self) -> None:
        done, stop_here_at, give_up_at = self._leaving
        now = self._node.clock.monotonic()
        if self._book.held and now < give_up_at:
            if now >= stop_here_at:
                stop_here_at = float("inf")
                self._leaving = (done, stop_here_at, give_up_at)
                for attempt_id in sorted(self._book.held):
                    self._on_event(attempts.Stop(attempt_id, None))
            return
        if self._registered and self._book.updates and now < give_up_at:
            return  # the exits go in the next report (the hand-back)
        if self._registered:
            try:
                self._call("goodbye", self.worker_id, self._node.address, timeout_s=5.0)
            except IrisError as exc:
                _log.warning("worker %s: goodbye not delivered: %s", self.worker_id, exc)
        self._registered, self._left, self._leaving = False, True, None
        done.set()

    @requires()  # called directly by this worker's own process (main.py), never remotely
    def machine_ending(self, reason: str) -> None:
        """Any thread, a signal handler too: this machine is being taken and its scheduler
        signals the tasks directly (Slurm). Attempts that exit unasked from now on are
        reported preempted, not failed (attempts.Ending); and reports wait (at most
        _NOTICE_HOLD_S) until `notice_sent`, so the controller hears the notice, and drains
        this worker, before an exit that would otherwise be placed back here. Not remote."""
        self._ending_since = SYSTEM_CLOCK.monotonic()
        self._inbox.post(self._on_event, attempts.Ending(reason))

    @requires()  # called directly by this worker's own process (main.py), never remotely
    def notice_sent(self) -> None:
        """Any thread: the notice reached the controller (or failed to): report again."""
        self._ending_since = None

    def _holding_reports(self) -> bool:
        since = self._ending_since
        return since is not None and SYSTEM_CLOCK.monotonic() - since < _NOTICE_HOLD_S

    # ------------------------------------------------------------ the kernel and its effects

    def _on_event(self, event: attempts.Event) -> None:
        """On the actor's turn: one event through the kernel, its effects carried out."""
        _, effects = attempts.handle(self._book, event, SYSTEM_CLOCK.monotonic())
        if isinstance(event, attempts.Exited):
            _log.info("attempt %s ended: %s", event.attempt_id, event.outcome)
        for effect in effects:
            if isinstance(effect, attempts.BeginStart):
                self._sampler.start()  # its thread from the first attempt on (once)
                sink = self._sinks.get(sink_key(effect.launch.log_store))
                self._executor.submit(self._work.start, effect.launch, sink)
            elif isinstance(effect, attempts.BeginStop):
                self._executor.submit(self._work.stop, effect)
            # Flush: `deliver` (the cast that brought the event) or the next tick reports

    def _on_shipping(self, attempt_id: str, key: SinkKey, sink: LogSink,
                     shipper: LogShipper) -> None:
        self._sinks.setdefault(key, sink)
        self._shippers[attempt_id] = shipper

    def _on_shipper_closed(self, attempt_id: str, dropped_lines: int) -> None:
        if self._shippers.pop(attempt_id, None) is not None:
            self._dropped_lines_closed += dropped_lines

    def _wake(self) -> None:
        """Have the actor drain its inbox now (an in-process cast: no socket)."""
        self._node.call(self._node.address, self._key, "deliver", oneway=True)

    # ------------------------------------------------------------ talking to the controller

    def _call(self, method: str, *args: Any, timeout_s: float = 5.0,
              auth: bytes | None = None) -> Any:
        """A call to the controller, as this worker (its credential) unless `auth`."""
        address, key = self._controller
        auth = auth or (self._cred.credential if self._cred is not None else None)
        return self._node.call(address, key, method, args, timeout_s=timeout_s,
                               auth=auth).result()

    def _fetch_bundle(self, digest: str) -> bytes:
        """A workspace bundle from the controller (called on an attempt's thread)."""
        return self._call("get_bundle", digest, timeout_s=300.0)

    def _register(self) -> None:
        """Register with what runs now and every update not yet acknowledged (an attempt
        that ended while the controller was away must not look lost)."""
        if self._cred is None and not self._join():
            return
        sent = list(self._book.updates.items())
        sent_at = SYSTEM_CLOCK.monotonic()
        try:
            self._call("register_worker", self.worker_id, self._node.address,
                       self._attributes, sorted(self._book.held), _wire(sent))
        except PermissionDeniedError as exc:
            self._refused(exc)
            return
        except OverloadedError as exc:  # told when to come back: later, not every second
            self._last_report = self._node.clock.monotonic() + exc.retry_after_s - HEARTBEAT_S
            _log.info("worker %s: the controller is busy: %s", self.worker_id, exc)
            return
        except IrisError as exc:
            _log.warning("worker %s: cannot register yet: %s", self.worker_id, exc)
            return
        self._renew(sent_at)
        self._registered = True
        self._acknowledge(sent, {update.attempt_id for _, (_, update) in sent})

    def _join(self) -> bool:
        """With the cluster token (and the credential it held, if refused), get this
        worker's own credential (credential.py)."""
        now = self._node.clock.monotonic()
        if now < self._rejoin.after:
            return False  # barred: not every heartbeat (credential.barred_backoff)
        if self._token is None:
            self._discover_token()
        if self._token is None:
            return False
        try:
            cred = credential.from_answer(
                self._call("join", self.worker_id, *self._rejoin.proof(), auth=self._token),
                self._controller[0])
        except PermissionDeniedError as exc:  # barred (or a wrong token): not soon better
            wait_s = self._rejoin.barred(now)
            _log.warning("worker %s: barred from joining: %s; trying to join again in "
                         "%.0f s", self.worker_id, exc, wait_s)
            return False
        except (IrisError, ValueError) as exc:
            _log.warning("worker %s: cannot join yet: %s", self.worker_id, exc)
            return False
        credential.write(self._root, cred)
        self._node.grant(cred.command_token, tokens.CONTROLLER)
        self._cred, self._rejoin = cred, credential.Rejoin()
        return True

    def _refused(self, exc: IrisError) -> None:
        """The controller no longer knows this worker's credential (revoked, lost, or the
        controller restarted): join again from the next tick, showing the credential it
        held (its file stays until the join replaces it: a restart of this process shows
        it too)."""
        _log.warning("worker %s: refused (%s); joining again", self.worker_id, exc)
        if self._cred is not None:
            self._node.revoke(self._cred.command_token)
            self._rejoin.held = self._cred.credential
        self._cred, self._registered = None, False

    def _discover_token(self) -> None:
        """On the controller's own host: read the token from the state directory it names
        (only a process allowed to read that directory may join)."""
        try:
            state_dir = self._call("state_dir")
            self._token = tokens.read(Path(state_dir) / tokens.CLUSTER_TOKEN_FILE)
        except (IrisError, TypeError) as exc:
            _log.warning("worker %s: no cluster token (pass --token-file or %s): %s",
                         self.worker_id, tokens.ENV_TOKEN, exc)

    def _report(self) -> None:
        # One view, as the book is only changed on this turn: an attempt is either held or
        # has its update here.
        sent = list(self._book.updates.items())
        sent_at = SYSTEM_CLOCK.monotonic()
        # Usage readings ride along only when there are some (most reports have none).
        usage = samples_for(self._sampler.take(), self._book.held)
        try:
            answer = control.decode(control.ReportAnswer, self._route.report(
                (self.worker_id, _wire(sent), {"log_shipping": self._shipping_stats()},
                 sorted(self._book.held), *([usage] if usage else [])),
                self._cred.credential if self._cred else None,
                lambda *args: self._call("report", *args)))
        except PermissionDeniedError as exc:
            self._refused(exc)
            return
        except IrisError as exc:
            _log.warning("worker %s: report failed (will retry): %s", self.worker_id, exc)
            return
        if answer.reregister:
            self._registered = False
            return
        self._renew(sent_at)
        self._route.follow(answer.reports_to)  # a controller with report fronts points us
        self._interval = report_interval(answer.interval_s)
        self._acknowledge(sent, set(answer.acked))

    def _acknowledge(self, sent: list, acked: set[str]) -> None:
        self._on_event(attempts.Acked(tuple((key, seq) for key, (seq, _) in sent),
                                      frozenset(acked)))

    def _renew(self, sent_at: float) -> None:
        """The controller heard us: our attempts may run FENCE_AFTER_S from `sent_at`."""
        until = sent_at + lease.FENCE_AFTER_S
        lease.write(self._root, lease.Lease(self._me[0], self._me[1], self.worker_id,
                                            self._node.address, self._controller[0], until))
        self._on_event(attempts.LeaseRenewed(until))  # starts that waited for it may go
        self._ensure_watchdog()

    def _ensure_watchdog(self) -> None:
        env = dict(os.environ)
        if self._token is not None:
            env[tokens.ENV_TOKEN] = self._token.hex()
        try:
            ensure_running(self._root, env)
        except OSError as exc:
            _log.error("worker %s: cannot start the attempt watchdog: %s", self.worker_id, exc)

    def _shipping_stats(self) -> dict:
        """For /metrics: the worst lag over live shippers (how old output is when stored, or
        the oldest still unstored, whichever is worse; 0 with nothing shipping) and the
        lines dropped over this worker's life, so the controller can sum it as a counter."""
        dropped, lag = self._dropped_lines_closed, 0.0
        for shipper in self._shippers.values():
            stats = shipper.stats()
            dropped += stats.dropped_lines
            lag = max(lag, stats.flush_lag_s, stats.pending_age_s)
        return {"max_flush_lag_s": lag, "dropped_lines": dropped}


def report_interval(asked: Any) -> float:
    """The interval the controller asked for, within [HEARTBEAT_S, REPORT_INTERVAL_MAX_S]
    (a controller from before intervals asks for none: HEARTBEAT_S)."""
    if isinstance(asked, bool) or not isinstance(asked, int | float) or asked != asked:
        return HEARTBEAT_S
    return min(max(float(asked), HEARTBEAT_S), REPORT_INTERVAL_MAX_S)


def _wire(sent: list) -> list[dict]:
    """Updates as the controller decodes them (control.AttemptUpdate), without the fields
    left at their defaults."""
    return [{name: value for name, value in dataclasses.asdict(update).items()
             if value is not None and value != ""} for _, (_, update) in sent]
