"""What the Region actors and the gang runner tell the controller: drains, deleted hosts, placed or
refused gang rounds, region reports. Part of ControllerService (service.py).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from iris.base.ids import new_id
from iris.controller import scheduler_view
from iris.controller.gangs.tracking import RoundId
from iris.controller.jobs import events as ev
from iris.controller.turns import now_mono, turn
from iris.wire import control

_log = logging.getLogger(__name__)


class RegionRequests:
    @turn
    def set_region_reports(self, reports: dict[str, dict]) -> None:
        """The Region actors' latest stats (reservations, capacity, scaling_up, blocked).
        A change in what is scaling or held back re-runs placement: reasons and routing
        depend on it."""
        def scaling(reps: dict) -> dict:
            return {r: (rep.get("scaling_up"), rep.get("blocked")) for r, rep in reps.items()}
        if scaling(reports) != scaling(self.region_reports):
            self._placement_due = True
        self.region_reports = dict(reports)
        self.hosts_gone({h: str(why) for rep in reports.values()
                         for h, why in rep.get("gone_hosts", {}).items()})

    @turn
    def forget_region(self, region: str) -> None:
        """A region reclaimed (reclaim.py: no host named it for a while): its pushes
        and reports are forgotten, and it counts towards max_regions again only when a
        host names it anew."""
        self._regions_seen.discard(region)
        self.gangs.inventory.regions.pop(region, None)
        self._full_at.pop(region, None)
        self.region_reports.pop(region, None)

    @turn
    def drain_hosts(self, hosts: Any) -> None:
        """A region wants to delete these hosts' idle slice (host -> slice): place nothing
        more on them; the next sync tells it which run nothing (then it deletes)."""
        msg = control.decode(control.DrainHosts, {"hosts": hosts})
        self.draining.update({h: s for h, s in msg.hosts.items() if h in self.workers.workers})
        self._touch_hosts(msg.hosts)
        self._placement_due = True
        self._run_many([], schedule=True)
        self._sync_regions(force=True)  # the region waits on this answer

    @turn
    def undrain_hosts(self, hosts: Any) -> None:
        """The region kept the slice after all (work reached it first): place on it again."""
        msg = control.decode(control.UndrainHosts, {"hosts": hosts})
        for host in msg.hosts:
            self.draining.pop(host, None)
        self._touch_hosts(msg.hosts)
        self._placement_due = True
        self._run_many([], schedule=True)
        self._sync_regions(force=True)  # the region waits on this answer

    @turn
    def hosts_gone(self, gone: Any) -> None:
        """Workers whose slice a region deleted (host id -> why): lost now, their work
        requeued, instead of at the heartbeat timeout; nothing more is placed on them."""
        msg = control.decode(control.HostsGone, {"gone": gone})
        for host in msg.gone:
            self.draining.pop(host, None)
        self._touch_hosts(msg.gone)
        gone = {h: why for h, why in msg.gone.items() if h in self.workers.workers}
        if not gone:
            return
        for worker_id in gone:
            del self.workers.workers[worker_id]
            self._forget_stops(worker_id)
        self._placement_due = True
        self._run_many([ev.WorkerLost(new_id("ev-"), w, why) for w, why in sorted(gone.items())],
                       schedule=True)

    # ------------------------------------------------------------ gangs

    @turn
    def gangs_settled(self, placed: list[tuple[RoundId, str, tuple[str, ...]]],
                      refused: list[tuple[RoundId, dict[str, str]]]) -> None:
        """Rounds the coordinator committed (round, region, hosts: assign the gang's tasks
        there) or that every candidate region refused (round, region -> why: the pass shows
        the reasons). All of one turn's outcomes, then ONE scheduling pass: a pass over
        every pending task costs milliseconds, a pass per gang capped gangs per second."""
        events = []
        for round_id, region, hosts in placed:
            placements, problem = self.gangs.placed_round(
                round_id, region, hosts, self.state, self.workers.workers, self.stopping,
                lambda: new_id("att-"))
            if problem is not None:
                self.pending_reasons[round_id.job_id] = problem
            if placements:
                spec = self.state.jobs[round_id.job_id].spec
                placements = [dataclasses.replace(p, accelerator=scheduler_view.chosen_accelerator(
                    spec, self.workers.workers.get(p.worker_id))) for p in placements]
                events.append(ev.Assign(new_id("ev-"), tuple(placements)))
        for round_id, reasons in refused:
            self.gangs.unplaceable(round_id, reasons, now_mono(self))
        self._placement_due = True
        self._run_many(events, schedule=True)
