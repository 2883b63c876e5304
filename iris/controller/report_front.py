"""A report front: a helper process on the controller's host that takes workers' reports off
the controller's socket (issue 32 item 3; docs/architecture.md, Report fronts).

    python -m iris.controller.report_front INDEX CONTROLLER_ADDRESS STATE_DIR BIND [KEYS_DIR]

Not the supervision (report_fronts.py, in the controller's process, starts, watches and
restarts these). A front is an Iris node of its own, binding its own ROUTER, that serves
the controller's key with one worker method, `report`, checked as the controller checks
it: the same role rule (the "worker" role, speaking only as the id its credential names:
hosting.py), the same `check_report`, the same batching (one per worker waiting, newest
wins). What it cannot check it refuses with the controller's own errors, and nothing it
refuses reaches the controller. Each batch of checked reports goes to the controller in
ONE call (`front_reports`, as the "controller" role: the front reads the controller's
secret from the state directory, which only the controller's user can read), and the
controller's answers go back to each worker from here. The worker credentials it honours
are the controller's: pushed to it (`grants`) when it says it is up (`front_hello`) and
at every grant or revocation after that.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from iris.actors import Node, NodeConfig, actor, tokens
from iris.actors.batching import batched
from iris.actors.hosting import requires
from iris.actors.keys import CONTROLLER_KEY
from iris.actors.security import Security
from iris.base.errors import InvalidRequestError, IrisError
from iris.controller.credentials import controller_token, load_secret
from iris.controller.report_check import check_report

_log = logging.getLogger(__name__)
# A batch's call to the controller: as long as a worker waits for its report's answer.
FORWARD_TIMEOUT_S = 5.0
# A front stops when its controller has not answered `front_hello` for this long (it is
# gone); a controller merely busy (a registration storm keeps its turn for seconds) answers
# late, and the front keeps serving meanwhile.
ORPHAN_AFTER_S = 60.0
HELLO_EVERY_S = 5.0
_ROLES = (tokens.WORKER, tokens.REVOKED)  # the only roles a controller hands a front


def as_item(msg: Any) -> tuple:
    """A checked report as it crosses to the controller (WorkerReport's fields, in order)."""
    return (msg.worker_id, msg.updates, msg.stats, msg.running, msg.usage)


@actor
class ReportFront:
    """Served under CONTROLLER_KEY in the front's own node: workers call it as the controller."""

    def __init__(self, node: Node, index: int, controller: str, auth: bytes):
        self._node, self._index, self._controller, self._auth = node, index, controller, auth
        self.forwarded = self.batches = 0

    @requires(tokens.WORKER)
    @batched("_reports", check=check_report, late=True, key=lambda r: r.worker_id)
    def report(self, worker_id: str, updates: list[dict], stats: dict | None = None,
               running: list[str] | None = None, usage: list[dict] = ()) -> dict:
        """Over the wire a report is always batched (`_reports`); never called directly."""
        raise InvalidRequestError("report: a front takes reports over the wire only")

    def _reports(self, msgs: list) -> list:
        """One batch, one call to the controller; its answers, one per report. If the
        controller cannot be reached every worker of the batch hears why (it reports to
        the controller directly next: worker/actor.py)."""
        self.batches += 1
        self.forwarded += len(msgs)
        try:
            return self._node.call(self._controller, CONTROLLER_KEY, "front_reports",
                                   (self._index, [as_item(m) for m in msgs]),
                                   timeout_s=FORWARD_TIMEOUT_S, auth=self._auth).result()
        except IrisError as exc:
            _log.warning("front %d: a batch of %d reports did not reach the controller: %s",
                         self._index, len(msgs), exc)
            return [exc] * len(msgs)

    @requires(tokens.CONTROLLER)
    async def grants(self, changes: list) -> int:
        """The controller's worker credentials: (token, role, worker id) each; role None
        revokes. Only the roles a controller hands workers are taken. On the node's loop,
        where calls are let in (a turn behind a batch waiting for the controller let a
        worker pointed here meanwhile be refused)."""
        for token, role, principal in changes:
            if role is None:
                self._node.revoke(bytes(token))
            elif role in _ROLES:
                self._node.grant(bytes(token), role, principal)
        return len(changes)

    @requires(tokens.CONTROLLER)
    def counts(self) -> dict:
        return {"index": self._index, "batches": self.batches, "reports": self.forwarded}


def serve(index: int, controller: str, state_dir: Path, bind: str,
          keys_dir: str | None, stop: threading.Event) -> None:
    """Serve as front `index` until `stop`, or until the controller has not answered
    `front_hello` for ORPHAN_AFTER_S (gone), or answers that it replaced this front."""
    auth = controller_token(load_secret(state_dir))
    security = Security.load(keys_dir) if keys_dir else None
    node = Node(NodeConfig(bind=bind), security=security).start()
    try:
        node.grant(auth, tokens.CONTROLLER)
        node.host(CONTROLLER_KEY, ReportFront, (node, index, controller, auth))
        answered = node.clock.monotonic()
        while not stop.is_set():
            try:  # who we are, and that we are alive; the controller pushes the grants
                hired = node.call(controller, CONTROLLER_KEY, "front_hello",
                                  (index, node.address, os.getpid()), timeout_s=10.0,
                                  auth=auth).result()
                answered = node.clock.monotonic()
            except IrisError as exc:
                if node.clock.monotonic() - answered > ORPHAN_AFTER_S:
                    _log.error("front %d: the controller at %s has not answered for %.0f s "
                               "(%s); stopping", index, controller, ORPHAN_AFTER_S, exc)
                    return
                hired = True  # busy, not gone
            if not hired:  # the controller started another front in this one's place
                _log.error("front %d: replaced by the controller; stopping", index)
                return
            stop.wait(HELLO_EVERY_S)
    finally:
        node.stop()


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    index, controller, state_dir, bind = int(argv[0]), argv[1], Path(argv[2]), argv[3]
    keys_dir = argv[4] if len(argv) > 4 else None
    try:  # a connection per worker it serves, as the controller's (main.raise_open_files)
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        _log.warning("front %d: cannot raise the open-files limit: %s", index, exc)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    serve(index, controller, state_dir, bind, keys_dir, stop)


if __name__ == "__main__":
    main(sys.argv[1:])
