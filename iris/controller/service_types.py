"""What the controller service is configured with and what it leaves for its shell: the
ControllerConfig, the Command to a worker, the JobsFinished notice. Plain data; the service
is service.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iris.controller.regions.capacity import Offer
from iris.controller.regions.region import RegionScaling
from iris.controller.workers import DEFAULT_DEAD_AFTER_S
from iris.logstore.config import LogStoreConfig
from iris.wire import control

__all__ = ["Command", "ControllerConfig", "JobsFinished"]


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
    # Regions whose actor is served by another process: region -> that node's address
    # (regions/remote.py; checked there). No actor is made here for them.
    region_actors: dict[str, str] = field(default_factory=dict)
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
    # Report fronts (report_fronts.py): helper processes that take the workers' reports off
    # the controller's socket and hand it checked batches. 0: the controller takes them.
    report_fronts: int = 0
    # The CURVE keys directory the controller serves with, for its fronts to serve with too.
    keys_dir: str | None = None


@dataclass(frozen=True)
class Command:
    """Something to tell a worker, as its typed control-plane message: a `control.Launch`
    (start_attempt) or a `control.StopRequest` (stop_attempt). The method is the type's."""

    worker_id: str
    address: str
    message: control.Launch | control.StopRequest

    @property
    def method(self) -> str:
        return _METHODS[type(self.message)]

    @property
    def kind(self) -> str:
        """"start" or "stop"."""
        return self.method.split("_", 1)[0]

    @property
    def body(self) -> dict:
        """The message as it goes on the wire (control.encode)."""
        return control.encode(self.message)


_METHODS = {control.Launch: "start_attempt", control.StopRequest: "stop_attempt"}


@dataclass(frozen=True)
class JobsFinished:
    """Jobs that reached a final state: whoever waits on them is woken."""

    job_ids: tuple[str, ...]
