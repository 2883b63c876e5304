"""The blocking half of the Worker actor: one attempt's start and stop, run on its executor.

Not decisions (attempts.py decides) and not actor state: everything found out here (the
attempt's phase, how it ended, its log shipper) goes back to the actor as a message through
its Inbox, and runs there on the actor's turn. Starting can take minutes (a bundle fetched
and unpacked, a venv built by uv, a zygote forked) and stopping up to the grace period
(SIGTERM, grace, SIGKILL), which is why neither may run on the actor's own thread.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from iris.base.errors import IrisError
from iris.base.resources import Resources
from iris.wire import control
from iris.worker import attempts
from iris.worker.inbox import Inbox
from iris.worker.outcome import Outcome
from iris.worker.ports import PortBook, port_env
from iris.worker.process import AttemptProcess
from iris.worker.runner import AttemptRequest, AttemptRunner, AttemptState
from iris.worker.usage_sampler import UsageSampler

if TYPE_CHECKING:
    from iris.logstore.shipper import LogShipper
    from iris.logstore.sinks import LogSink

_log = logging.getLogger(__name__)
# Error text of a failed attempt: the last lines it wrote to stderr.
_ERROR_TAIL_LINES = 20

SinkKey = tuple
OnShipping = Callable[[str, SinkKey, "LogSink", "LogShipper"], None]
OnShipperClosed = Callable[[str, int], None]


def sink_key(log_store: dict) -> SinkKey:
    return tuple(sorted(log_store.items()))


def request_of(launch: control.Launch, ports: dict[str, int] | None = None) -> AttemptRequest:
    entry = launch.entrypoint
    return AttemptRequest(
        task_id=f"{launch.job_id}[{launch.task_index}]", attempt=launch.attempt_number,
        resources=Resources.from_dict(launch.resources or {}),
        command=tuple(entry.argv) if entry.kind == "command" else (),
        payload=entry.payload if entry.kind == "callable" else None,
        pip=tuple(launch.pip), env={**launch.env, **port_env(ports or {})},
        bundle=launch.bundle)


class AttemptWork:
    """Runs on executor threads (and the runner's process watchers); posts what it learns."""

    def __init__(self, runner: AttemptRunner, inbox: Inbox,
                 on_event: Callable[[attempts.Event], None], on_shipping: OnShipping,
                 on_closed: OnShipperClosed, sampler: UsageSampler | None = None,
                 ports: PortBook | None = None):
        self._runner = runner
        self._inbox = inbox
        self._on_event = on_event
        self._on_shipping = on_shipping
        self._on_closed = on_closed
        self.sampler = sampler  # what each attempt used, sent with its end
        self.ports = ports or PortBook()

    def start(self, launch: control.Launch, sink: LogSink | None) -> None:
        """Start one attempt; its phases and its end come back as events."""
        # The log store's modules at the first attempt, not at every worker's start (an idle
        # worker, or one that runs nothing, never needs them: ~10 ms of CPU each).
        from iris.logstore.config import LogStoreConfig, open_sink
        from iris.logstore.shipper import LogShipper

        attempt_id = launch.attempt_id
        shipper = None
        try:
            if sink is None:  # one per log store, kept by the actor: a GCS client is costly
                sink = open_sink(LogStoreConfig(**launch.log_store))
            shipper = LogShipper(sink, launch.job_id, launch.task_index,
                                 launch.attempt_number)
            self._inbox.post(self._on_shipping, attempt_id, sink_key(launch.log_store), sink,
                             shipper)
            ports = self.ports.assign(attempt_id, Resources.from_dict(
                launch.resources or {}).ports)
            watch = _Watch(self, attempt_id, shipper, ports)
            self._runner.start(request_of(launch, ports), watch.on_output, watch.on_state,
                               watch.on_exit)
        except Exception as exc:  # refused or failed to build: the attempt fails with why
            self.ports.release(attempt_id)
            if shipper is not None:
                shipper.write("stderr", f"[iris] attempt could not start: {exc}\n")
                self.close_shipper(attempt_id, shipper)
            self.tell(attempts.StartFailed(attempt_id, f"could not start: {exc}",
                                           getattr(exc, "exit_code", 1)), urgent=True)

    def stop(self, stop: attempts.BeginStop) -> None:
        try:
            self._runner.stop(stop.task_id, stop.number, stop.grace_s)
        except IrisError as exc:  # not running any more: nothing to stop
            _log.info("stop of %s: %s", stop.attempt_id, exc)

    def tell(self, event: attempts.Event, urgent: bool = False) -> None:
        """Send the actor an event for its kernel (urgent: wake it now, not at its tick)."""
        self._inbox.post(self._on_event, event, urgent=urgent)

    def close_shipper(self, attempt_id: str, shipper: LogShipper) -> None:
        """Flush the attempt's last lines to the log store, then tell the actor."""
        self._inbox.post(self._on_closed, attempt_id, shipper.close().dropped_lines)


class _Watch:
    """One attempt's callbacks, called on the runner's threads (start, output readers, the
    process watcher): output goes straight to the shipper, the rest becomes messages."""

    def __init__(self, work: AttemptWork, attempt_id: str, shipper: LogShipper,
                 ports: dict[str, int]):
        self._work = work
        self._attempt_id = attempt_id
        self._shipper = shipper
        self._ports = ports
        self._tail: collections.deque[bytes] = collections.deque(maxlen=_ERROR_TAIL_LINES)

    def on_output(self, stream: str, line: bytes, ts: float) -> None:
        self._shipper.write(stream, line, ts)
        if stream == "stderr":
            self._tail.append(line)

    def on_state(self, state: AttemptState) -> None:
        status = "building" if state is AttemptState.BUILDING else "running"
        self._work.tell(attempts.PhaseReached(
            self._attempt_id, status, self._ports if status == "running" else None))

    def on_exit(self, proc: AttemptProcess, outcome: Outcome) -> None:
        result = _read_result(proc.spec.attempt_dir / "result.pkl")
        usage = None
        if self._work.sampler is not None:
            try:
                usage = self._work.sampler.finish(proc, outcome)
            except Exception:  # the end is reported whatever the accounting says
                _log.exception("usage totals of %s", self._attempt_id)
        self._work.ports.release(self._attempt_id)
        self._work.close_shipper(self._attempt_id, self._shipper)  # stored before "exited"
        self._work.tell(attempts.Exited(self._attempt_id, outcome, result,
                                        b"".join(self._tail), usage), urgent=True)


def _read_result(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
