"""What the Region actors tell the controller: drains, deleted hosts, failed inventory pushes,
region reports (their replies to gang frames go straight to the gangs object: service.py).
Requests that ControllerService (service.py) runs in its turn: each takes the service and
goes through its components' interfaces (region_pushes.py above all) and its one path of
change (`run_many`).
"""

from __future__ import annotations

import logging
from typing import Any

from iris.base.ids import new_id
from iris.controller.jobs import events as ev
from iris.wire import control

_log = logging.getLogger(__name__)


def set_region_reports(svc: Any, reports: dict[str, dict]) -> None:
    """The Region actors' latest stats (reservations, capacity, scaling_up, blocked).
    A change in what is scaling or held back re-runs placement: reasons and routing
    depend on it."""
    if svc.pushes.set_reports(reports):
        svc.replan()
    hosts_gone(svc, svc.pushes.gone_in_reports())


def forget_region(svc: Any, region: str) -> None:
    """A region reclaimed (reclaim.py: no host named it for a while): its pushes and
    reports are forgotten, and it counts towards max_regions again only when a host names
    it anew."""
    svc.desk.forget_region(region)
    svc.pushes.forget_region(region)


def drain_hosts(svc: Any, hosts: Any) -> None:
    """A region wants to delete these hosts' idle slice (host -> slice): place nothing
    more on them; the next sync tells it which run nothing (then it deletes)."""
    msg = control.decode(control.DrainHosts, {"hosts": hosts})
    workers = svc.desk.workers.workers
    svc.pushes.drain({h: s for h, s in msg.hosts.items() if h in workers})
    svc.pushes.touch(msg.hosts)
    svc.replan()
    svc.run_many([], schedule=True)
    svc.sync_regions(force=True)  # the region waits on this answer


def undrain_hosts(svc: Any, hosts: Any) -> None:
    """The region kept the slice after all (work reached it first): place on it again."""
    msg = control.decode(control.UndrainHosts, {"hosts": hosts})
    svc.pushes.undrain(msg.hosts)
    svc.replan()
    svc.run_many([], schedule=True)
    svc.sync_regions(force=True)  # the region waits on this answer


def hosts_gone(svc: Any, gone: Any) -> None:
    """Workers whose slice a region deleted (host id -> why): lost now, their work
    requeued, instead of at the heartbeat timeout; nothing more is placed on them."""
    msg = control.decode(control.HostsGone, {"gone": gone})
    svc.pushes.undrain(msg.gone)
    workers = svc.desk.workers.workers
    gone = {h: why for h, why in msg.gone.items() if h in workers}
    if not gone:
        return
    for worker_id in gone:
        svc.desk.forget(worker_id)
        svc.forget_stops(worker_id)
    svc.replan()
    svc.run_many([ev.WorkerLost(new_id("ev-"), w, why) for w, why in sorted(gone.items())],
                 schedule=True)


def inventory_push_failed(svc: Any, region: str, seq: int, why: str) -> None:
    """A region refused (or never answered) push `seq`: it gets its whole inventory
    next (unless a whole one went after that push). A reclaimed region's are moot."""
    if region in svc.pushes.inventory.regions and svc.pushes.push_failed(region, seq):
        _log.warning("region %s: inventory push %d failed (%s); sending it whole",
                     region, seq, why)
        svc.sync_regions()
