"""Where a worker's reports go: to the report front the controller named
(controller/report_fronts.py), else to the controller itself.

A front that fails or refuses a report (dead, restarted, not yet told this worker's
credential) is dropped and that report goes to the controller directly at once; the
controller's answer points the worker at a front again once one is up (`follow`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from iris.actors.node import Node
from iris.base.errors import IrisError

_log = logging.getLogger(__name__)
# Reporting through a front, the controller's connection is closed after this long unused,
# so that a controller of more hosts than it has file descriptors holds only the busy ones.
CONTROLLER_IDLE_S = 10.0
_FRONT_TIMEOUT_S = 5.0


class ReportRoute:
    def __init__(self, node: Node, worker_id: str, controller: tuple[str, str]):
        self._node = node
        self._worker_id = worker_id
        self._controller = controller  # (address, key)
        self._front: str | None = None  # the report front the controller named, if any

    def report(self, args: tuple, auth: bytes | None, direct: Callable[..., Any]) -> Any:
        """`report` with `args` through the front, or `direct(*args)` to the controller."""
        if self._front is not None:
            try:
                answer = self._node.call(self._front, self._controller[1], "report", args,
                                         timeout_s=_FRONT_TIMEOUT_S, auth=auth).result()
                self._node.let_go(CONTROLLER_IDLE_S, self._controller[0])
                return answer
            except IrisError as exc:
                _log.warning("worker %s: report front %s failed (%s): reporting to the "
                             "controller directly", self._worker_id, self._front, exc)
                self._front = None
        return direct(*args)

    def follow(self, reports_to: str | None) -> None:
        """The answer's `reports_to`: None says nothing, "" the controller, else a front."""
        if reports_to is not None:
            self._front = reports_to or None
