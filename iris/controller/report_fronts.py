"""Report fronts, seen from the controller: K helper processes started, watched and restarted
here; the worker credentials mirrored to them; which front each worker reports to.

Not the front itself (report_front.py). `ControllerConfig.report_fronts` = K > 0 starts K
fronts on the controller's host, each binding its own port beside the controller's. A
worker is pointed at front crc32(id) % K by the answer to a report it sends the controller
directly (`reports_to`), once that front has said it is up (`front_hello`); the front's
own answers leave the worker where it is. A worker whose front does not answer (dead,
hung, or refusing its credential) sends that same report to the controller directly at
once, and is pointed back when the front is up again. So a front's death costs its hosts
at most one call timeout (5 s) of silence, well inside the 30 s that loses a host; the
controller restarts a dead front on its next tick and logs why (`fronts` in the snapshot
counts the restarts).

Trust: a front is started by the controller, as its user, and speaks to it with the
controller's own token, read from the state directory (0600 files); the controller
accepts batches (`front_reports`) only with that token.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import zlib
from typing import Any
from urllib.parse import urlparse

from iris.actors import Node
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import ConfigError, InvalidRequestError
from iris.controller.credentials import controller_token, load_secret
from iris.wire import control

_log = logging.getLogger(__name__)
MAX_FRONTS = 64
RESTART_AFTER_S = 1.0  # a front that keeps dying is restarted at most once a second
# The controller's own connections to workers (its commands) unused this long are closed,
# checked every LET_GO_EVERY_S: with fronts, it holds a descriptor per busy worker only.
IDLE_PEER_S, LET_GO_EVERY_S = 60.0, 10.0


def check_fronts(count: object) -> int:
    """How many report fronts, checked (ConfigError names the setting)."""
    if type(count) is not int or not 0 <= count <= MAX_FRONTS:
        raise ConfigError(f"report_fronts: a whole number of helper processes, 0-{MAX_FRONTS}, "
                          f"not {count!r}")
    return count


class ReportFronts:
    def __init__(self, count: int, node: Node, state_dir: str, auth: bytes,
                 keys_dir: str | None = None):
        check_fronts(count)
        self._node, self._auth = node, auth
        host = urlparse(node.address).hostname or "127.0.0.1"
        self._argv = [str(state_dir), f"tcp://{host}:0"] + ([keys_dir] if keys_dir else [])
        self._procs: list[Any] = [None] * count
        self._addresses: list[str | None] = [None] * count
        self._started = [0.0] * count
        self.restarts = [0] * count
        self._let_go_at = 0.0
        # token -> (role, worker id): the worker credentials a front must honour.
        self._grants: dict[bytes, tuple[str, str | None]] = {}

    def __len__(self) -> int:
        return len(self._procs)

    # ------------------------------------------------------------ credentials (any thread)

    def grant(self, token: bytes, role: str, principal: str | None = None) -> None:
        self._node.grant(token, role, principal)
        self._grants[token] = (role, principal)
        self._push([(token, role, principal)])

    def revoke(self, token: bytes) -> None:
        self._node.revoke(token)
        self._grants.pop(token, None)
        self._push([(token, None, None)])

    def _push(self, changes: list, only: str | None = None) -> None:
        for address in [only] if only else self._addresses:
            if address is not None:  # a call, not a cast: owed an answer, never let go
                self._node.call(address, CONTROLLER_KEY, "grants", (changes,), timeout_s=30.0,
                                auth=self._auth).add_done_callback(_log_failure)

    # ------------------------------------------------------------ supervision

    def start(self, now: float) -> None:
        for index in range(len(self._procs)):
            self._spawn(index, now)

    def _spawn(self, index: int, now: float) -> None:
        self._started[index] = now
        self._procs[index] = subprocess.Popen(
            [sys.executable, "-m", "iris.controller.report_front", str(index),
             self._node.address, *self._argv], stdin=subprocess.DEVNULL)

    def hello(self, index: Any, address: Any, pid: Any) -> bool:
        """A front says it is up at `address`: the grants go to it (all of them, the first
        time it says so); True if it is a front this controller started."""
        if type(index) is not int or not 0 <= index < len(self._procs):
            raise InvalidRequestError(f"front_hello: no front {index!r}", "index")
        proc = self._procs[index]
        if proc is None or proc.pid != pid or type(address) is not str:
            return False  # one this controller replaced: it stops when it is not re-hired
        if self._addresses[index] != address:
            self._addresses[index] = address
            self._push(list((t, r, p) for t, (r, p) in self._grants.items()), only=address)
            _log.info("report front %d up at %s (pid %d)", index, address, pid)
        return True

    def tick(self, now: float) -> None:
        """Restart a front that exited (logged, counted); close idle connections."""
        if now - self._let_go_at >= LET_GO_EVERY_S:
            self._let_go_at = now
            self._node.let_go(IDLE_PEER_S)
        for index, proc in enumerate(self._procs):
            if proc is None or proc.poll() is None:
                continue
            if self._addresses[index] is not None:
                _log.warning("report front %d (pid %d) exited with %s: its hosts report to "
                             "the controller directly until it is back; restarting it",
                             index, proc.pid, proc.returncode)
                self._addresses[index] = None
            if now - self._started[index] >= RESTART_AFTER_S:
                self.restarts[index] += 1
                self._spawn(index, now)

    def address_for(self, worker_id: str) -> str:
        """Where `worker_id` should report: its front's address, or "" (the controller
        itself) while that front is not up."""
        return self._addresses[zlib.crc32(worker_id.encode()) % len(self._addresses)] or ""

    def counts(self) -> dict:
        return {"count": len(self._procs), "up": sum(a is not None for a in self._addresses),
                "restarts": sum(self.restarts), "pids": [p.pid if p else None
                                                         for p in self._procs]}

    def close(self) -> None:
        for proc in self._procs:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            if proc is not None:
                try:
                    proc.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def start_fronts(config: Any, node: Node) -> ReportFronts | None:
    """The fronts `config.report_fronts` asks for, started; None for 0 (reports come to the
    controller's own socket, as without fronts)."""
    if not config.report_fronts:
        return None
    fronts = ReportFronts(config.report_fronts, node, str(config.state_dir),
                          controller_token(load_secret(config.state_dir)), config.keys_dir)
    fronts.start(node.clock.monotonic())
    return fronts


def front_batch(index: Any, items: Any) -> list:
    """A front's batch as WorkerReports (on the controller's loop thread). The front checked
    each report (`check_report`) and speaks with the controller's token: only the shape is
    checked here."""
    if type(items) is not list:
        raise InvalidRequestError(f"front_reports: items is a list, not {type(items).__name__}",
                                  "items")
    return [control.WorkerReport(*item) for item in items]


def split_answers(batches: list, answers: list) -> list:
    """The answers to the reports of several batches, one list per batch, in order."""
    out, at = [], 0
    for batch in batches:
        out.append(answers[at:at + len(batch)])
        at += len(batch)
    return out


def point_at_fronts(fronts: ReportFronts, msgs: list, answers: list) -> list:
    """The answers to reports sent to the controller directly, each saying where its worker
    reports next: its front, or "" (here) while that front is not up."""
    for msg, answer in zip(msgs, answers, strict=True):
        if type(answer) is dict:
            answer["reports_to"] = fronts.address_for(msg.worker_id)
    return answers


def _log_failure(fut: Any) -> None:
    error = fut.exception()
    if error is not None:  # its workers are refused there and report here directly meanwhile
        _log.warning("grants to a report front failed: %s", error)
