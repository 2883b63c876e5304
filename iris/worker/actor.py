"""The Worker actor: one per host; runs the controller's attempts through an AttemptRunner.

Not the process machinery (runner.py and below). The controller calls `start_attempt` and
`stop_attempt`; each attempt then runs on its own thread (building an environment can take
minutes and must not hold the actor's mailbox). State changes are queued and sent to the
controller from `on_tick`, at most TICK_S after they happen, in one `report` call that also
serves as the heartbeat; an update is dropped only once the controller acknowledged it, so
a controller restart loses none. Logs go to the log store as the task prints.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris.actors import Node, actor, tokens
from iris.actors.hosting import requires
from iris.actors.keys import worker_key
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import IrisError, OverloadedError
from iris.base.resources import Resources
from iris.logstore.config import LogStoreConfig, open_sink
from iris.logstore.shipper import LogShipper
from iris.logstore.sinks import LogSink
from iris.wire import control
from iris.worker import cgroups, lease
from iris.worker.outcome import Outcome, OutcomeKind
from iris.worker.process import AttemptProcess
from iris.worker.records import proc_start_ticks
from iris.worker.runner import AttemptRequest, AttemptRunner, AttemptState, RunnerConfig
from iris.worker.watchdog import ensure_running

_log = logging.getLogger(__name__)
# Heartbeat period: the controller declares a worker lost after 3 s of silence.
HEARTBEAT_S = 1.0
# Error text of a failed attempt: the last lines it wrote to stderr.
_ERROR_TAIL_LINES = 20


@dataclass
class _Running:
    attempt_id: str
    task_id: str
    number: int
    stop_reason: str = ""


@actor
class Worker:
    # State changes wait at most this long before they are reported.
    tick_interval_s = 0.02

    def __init__(self, worker_id: str, controller_address: str, controller_key: str,
                 attributes: dict[str, str], root: Path, node: Node,
                 advertised: Resources, grace_s: float = 10.0, token: bytes | None = None):
        self.worker_id = worker_id
        self._node = node
        self._controller = (controller_address, controller_key)
        self._key = worker_key(worker_id)
        self._attributes = attributes
        self._runner = AttemptRunner(RunnerConfig(root=root, grace_s=grace_s), advertised,
                                     cgroups=cgroups.detect(), fetch_bundle=self._fetch_bundle)
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._updates: collections.OrderedDict[tuple[str, str], dict] = collections.OrderedDict()
        self._registered = False
        self._last_report = 0.0
        self._sinks: dict[tuple, LogSink] = {}
        self._shippers: dict[str, LogShipper] = {}  # attempt id -> its live log shipper
        self._dropped_lines_closed = 0  # by shippers already closed, for a lifetime counter
        # The cluster token (tokens.py): presented on calls to the controller, and required
        # of whoever calls start/stop here. Found at registration when not handed in.
        self._token = token
        if token is not None:
            node.grant(token, tokens.MEMBER)
        # Fencing (lease.py): the lease is renewed by every acknowledged report, and a
        # watchdog process that outlives this one stops the attempts when it lapses.
        self._root = root
        self._me = (os.getpid(), proc_start_ticks(os.getpid()) or 0)
        self._renewed = threading.Condition()

    # ------------------------------------------------------------ called by the controller

    @requires(tokens.MEMBER)
    def start_attempt(self, launch: dict) -> bool:
        control.decode(control.Launch, launch)  # checked whole before anything changes
        attempt_id = launch["attempt_id"]
        with self._lock:
            if attempt_id in self._running:
                return True  # a re-sent start (reconcile): already ours
            run = _Running(attempt_id, f"{launch['job_id']}[{launch['task_index']}]",
                           launch["attempt_number"])
            self._running[attempt_id] = run
        threading.Thread(target=self._run, args=(run, launch), daemon=True,
                         name=f"attempt-{attempt_id}").start()
        return True

    @requires(tokens.MEMBER)
    def stop_attempt(self, body: dict) -> bool:
        control.decode(control.StopRequest, body)
        with self._lock:
            run = self._running.get(body["attempt_id"])
        if run is None:
            return False
        run.stop_reason = body.get("reason", "stopped")
        threading.Thread(target=self._stop, args=(run, body.get("grace_s")), daemon=True).start()
        return True

    @requires()  # cast by this worker to itself
    def flush(self) -> None:
        """Report queued updates now (cast by the worker to itself when an attempt ends)."""
        if self._registered and self._updates:
            self._last_report = self._node.clock.monotonic()
            self._report()

    def status(self) -> dict:
        with self._lock:
            running = sorted(self._running)
        return {"worker_id": self.worker_id, "attempts": running, "free": self._runner.free()}

    # ------------------------------------------------------------ hooks

    def on_start(self) -> None:
        self._runner.recover(adopt=False)  # a previous life's attempts: killed, not run twice

    def on_tick(self) -> None:
        now = self._node.clock.monotonic()
        if not self._registered:
            if now - self._last_report >= HEARTBEAT_S or not self._last_report:
                self._last_report = now
                self._register()
            return
        if self._updates or now - self._last_report >= HEARTBEAT_S:
            self._last_report = now
            self._report()

    def on_stop(self) -> None:
        self._runner.close()  # every attempt stopped (its grace each): nothing left to fence
        if self._registered:  # so the controller requeues at once, not after the silence
            try:
                self._call("goodbye", self.worker_id, self._node.address, timeout_s=5.0)
            except IrisError as exc:
                _log.warning("worker %s: goodbye not delivered: %s", self.worker_id, exc)
        (self._root / lease.LEASE_NAME).unlink(missing_ok=True)  # the watchdog may go

    # ------------------------------------------------------------ talking to the controller

    def _call(self, method: str, *args: Any, timeout_s: float = 5.0) -> Any:
        address, key = self._controller
        return self._node.call(address, key, method, args, timeout_s=timeout_s,
                               auth=self._token).result()

    def _fetch_bundle(self, digest: str) -> bytes:
        """A workspace bundle from the controller (called on an attempt's thread)."""
        return self._call("get_bundle", digest, timeout_s=300.0)

    def _register(self) -> None:
        """Register with what runs now and every update not yet acknowledged (an attempt
        that ended while the controller was away must not look lost)."""
        if self._token is None:
            self._discover_token()
        with self._lock:
            running = sorted(self._running)
            sent = list(self._updates.items())
        sent_at = SYSTEM_CLOCK.monotonic()
        try:
            self._call("register_worker", self.worker_id, self._node.address,
                       self._attributes, running, [update for _, update in sent])
        except OverloadedError as exc:  # told when to come back: later, not every second
            self._last_report = self._node.clock.monotonic() + exc.retry_after_s - HEARTBEAT_S
            _log.info("worker %s: the controller is busy: %s", self.worker_id, exc)
            return
        except IrisError as exc:
            _log.warning("worker %s: cannot register yet: %s", self.worker_id, exc)
            return
        self._renew(sent_at)
        self._registered = True
        self._acknowledge(sent, {update["attempt_id"] for _, update in sent})

    def _discover_token(self) -> None:
        """On the controller's own host: read the token from the state directory it names
        (only a process allowed to read that directory gets the worker role)."""
        try:
            state_dir = self._call("state_dir")
            token = tokens.read(Path(state_dir) / tokens.CLUSTER_TOKEN_FILE)
        except (IrisError, TypeError) as exc:
            _log.warning("worker %s: no cluster token (pass --token-file or %s): %s",
                         self.worker_id, tokens.ENV_TOKEN, exc)
            return
        self._token = token
        self._node.grant(token, tokens.MEMBER)

    def _report(self) -> None:
        with self._lock:  # one view: an attempt is either running or has its update here
            sent = list(self._updates.items())
            running = sorted(self._running)
        sent_at = SYSTEM_CLOCK.monotonic()
        try:
            answer = self._call("report", self.worker_id, [update for _, update in sent],
                                {"log_shipping": self._shipping_stats()}, running)
        except IrisError as exc:
            _log.warning("worker %s: report failed (will retry): %s", self.worker_id, exc)
            return
        if answer.get("reregister"):
            self._registered = False
            return
        self._renew(sent_at)
        self._acknowledge(sent, set(answer.get("acked", ())))

    def _renew(self, sent_at: float) -> None:
        """The controller heard us: our attempts may run FENCE_AFTER_S from `sent_at`."""
        lease.write(self._root, lease.Lease(
            self._me[0], self._me[1], self.worker_id, self._node.address,
            self._controller[0], sent_at + lease.FENCE_AFTER_S))
        with self._renewed:
            self._renewed.notify_all()
        self._ensure_watchdog()

    def _lease_held(self) -> bool:
        """Wait (up to one lease) for a lapsed lease to be renewed: a start that raced the
        report whose acknowledgement renews it waits a moment instead of being fenced."""
        with self._renewed:
            return self._renewed.wait_for(
                lambda: not lease.lapsed(self._root, SYSTEM_CLOCK.monotonic()),
                timeout=lease.FENCE_AFTER_S)

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
        with self._lock:
            live = list(self._shippers.values())
            dropped = self._dropped_lines_closed
        lag = 0.0
        for shipper in live:
            stats = shipper.stats()
            dropped += stats.dropped_lines
            lag = max(lag, stats.flush_lag_s, stats.pending_age_s)
        return {"max_flush_lag_s": lag, "dropped_lines": dropped}

    def _close_shipper(self, attempt_id: str, shipper: LogShipper) -> None:
        final = shipper.close()
        with self._lock:
            if self._shippers.pop(attempt_id, None) is shipper:
                self._dropped_lines_closed += final.dropped_lines

    def _acknowledge(self, sent: list, acked: set[str]) -> None:
        with self._lock:
            for key, update in sent:  # a newer update under the same key stays queued
                if update["attempt_id"] in acked and self._updates.get(key) is update:
                    del self._updates[key]

    def _queue(self, attempt_id: str, status: str, **fields: Any) -> None:
        with self._lock:
            self._updates[(attempt_id, status)] = {"attempt_id": attempt_id, "status": status,
                                                   **fields}
        if status in ("exited", "preempted"):  # a finished task frees capacity: tell the controller now
            self._node.call(self._node.address, self._key, "flush", oneway=True)

    # ------------------------------------------------------------ one attempt (own thread)

    def _run(self, run: _Running, launch: dict) -> None:
        shipper = LogShipper(self._sink(launch["log_store"]), launch["job_id"],
                             launch["task_index"], launch["attempt_number"])
        with self._lock:
            self._shippers[run.attempt_id] = shipper
        tail: collections.deque[bytes] = collections.deque(maxlen=_ERROR_TAIL_LINES)

        def on_output(stream: str, line: bytes, ts: float) -> None:
            shipper.write(stream, line, ts)
            if stream == "stderr":
                tail.append(line)

        def on_state(state: AttemptState, detail: str) -> None:
            if state is AttemptState.BUILDING and detail:
                shipper.write("stderr", f"[iris build] {detail}\n")
            elif state is AttemptState.BUILDING:
                self._queue(run.attempt_id, "building")
            else:
                self._queue(run.attempt_id, "running")

        def on_exit(proc: AttemptProcess, outcome: Outcome) -> None:
            result = _read_result(proc.spec.attempt_dir / "result.pkl")
            self._close_shipper(run.attempt_id, shipper)
            self._finished(run, outcome, result, b"".join(tail))

        entry = launch["entrypoint"]
        request = AttemptRequest(
            task_id=run.task_id, attempt=run.number,
            resources=Resources.from_dict(launch.get("resources") or {}),
            command=tuple(entry["argv"]) if entry["kind"] == "command" else (),
            payload=entry["payload"] if entry["kind"] == "callable" else None,
            pip=tuple(launch.get("pip", ())), env=launch["env"], bundle=launch.get("bundle"))
        if not self._lease_held():  # cut off since: it would only be fenced at once
            self._close_shipper(run.attempt_id, shipper)
            self._forget(run)
            self._queue(run.attempt_id, "preempted", error="not started: this worker's lease "
                        "lapsed (no acknowledged report) before it could start")
            return
        try:
            self._runner.start(request, on_output, on_state, on_exit)
        except Exception as exc:  # refused or failed to build: the attempt fails with why
            shipper.write("stderr", f"[iris] attempt could not start: {exc}\n")
            self._close_shipper(run.attempt_id, shipper)
            self._forget(run)
            self._queue(run.attempt_id, "exited", exit_code=1, error=f"could not start: {exc}")

    def _stop(self, run: _Running, grace_s: float | None) -> None:
        with self._lock:  # the task's log says why it stops (a preemption notice, a kill)
            shipper = self._shippers.get(run.attempt_id)
        if shipper is not None:
            shipper.write("stderr", f"[iris] stopping (grace {grace_s} s): {run.stop_reason}\n")
        try:
            self._runner.stop(run.task_id, run.number, grace_s)
        except IrisError as exc:  # not running (yet, or any more): nothing to stop
            _log.info("stop of %s: %s", run.attempt_id, exc)

    def _finished(self, run: _Running, outcome: Outcome, result: bytes | None,
                  stderr_tail: bytes) -> None:
        self._forget(run)
        _log.info("attempt %s (%s) ended: %s", run.attempt_id, run.task_id, outcome)
        if outcome.kind is OutcomeKind.SUCCEEDED:
            self._queue(run.attempt_id, "exited", exit_code=0, result=result)
            return
        if lease.lapsed(self._root, SYSTEM_CLOCK.monotonic()):  # the watchdog fenced it
            self._queue(run.attempt_id, "preempted", error=(
                f"stopped by fencing: no acknowledged report for {lease.FENCE_AFTER_S:.0f} s "
                "(this worker was cut off from the controller)"))
            return
        code = outcome.exit_code if outcome.exit_code is not None else 137
        error = outcome.detail or outcome.kind.value
        if stderr_tail:
            error += "\n" + stderr_tail.decode("utf-8", "replace").rstrip()
        self._queue(run.attempt_id, "exited", exit_code=code or 1, error=error, result=result)

    def _sink(self, config: dict) -> LogSink:
        """One sink per log store (a GCS client is costly to build, and thread-safe to share)."""
        key = tuple(sorted(config.items()))
        with self._lock:
            sink = self._sinks.get(key)
            if sink is None:
                sink = self._sinks[key] = open_sink(LogStoreConfig(**config))
        return sink

    def _forget(self, run: _Running) -> None:
        with self._lock:
            self._running.pop(run.attempt_id, None)


def _read_result(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
