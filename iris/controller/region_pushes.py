"""Region pushes: what the controller tells its Region actors about their hosts, and what it
holds for them. Owns the hosts being drained, the hosts touched since the last push, when
each region was last synced, the regions' last reports and the demand routed to the
autoscaled ones, and each region's inventory as last pushed (gangs/inventory.py keeps it
from the facts of the hosts that changed: `note_hosts`; `inventory.whole` reads it from
scratch) with the pushes not taken yet. A component of ControllerService (service.py): the
fleet it reads is passed in, with `now`. No sockets, no clock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from iris.base.resources import Resources
from iris.controller.gangs import inventory
from iris.controller.gangs.inventory import Delta as SyncDelta
from iris.controller.jobs import events as ev
from iris.controller.jobs.state import KernelState
from iris.controller.regions import demand
from iris.controller.workers import WorkerInfo
from iris.wire import control

if TYPE_CHECKING:
    from iris.controller.regions.region import RegionScaling

_log = logging.getLogger(__name__)
# What changed in region inventories is pushed at most this often (and before any gang
# round): a delta costs what changed (gangs/inventory.py), whatever the fleet's size, so new
# hosts reach the regions' ledgers within 0.2 s...
SYNC_EVERY_S = 0.2
# ...but a WHOLE inventory (a region new to this controller, or one that refused a delta:
# it restarted, a push was lost) goes to a region no more often than every SYNC_S_PER_HOST
# x its hosts: a whole push is built, encoded, then checked by the Region actor, ~20 us a
# host in all (200 ms at 10,000 hosts on this 2-core machine, bench.fleet under py-spy).
# 20x that keeps whole pushes under 5 % of a core: every 4 s at 10,000 hosts.
SYNC_S_PER_HOST = 20 * 20e-6
# A Region that lost what it was pushed (it restarted; the last push was lost) is found
# within this long even when nothing changes: it gets an empty delta it cannot follow,
# refuses it, and is sent its whole inventory. One tiny message per region per 5 s; gangs
# meanwhile are offered from a stale view at worst, which the controller checks anyway.
KEEPALIVE_S = 5.0


@dataclass(frozen=True)
class SyncRegion:
    region: str
    slices: list[dict]
    busy: list[str]
    unmet: dict[str, int]  # scale group -> more slices wanted (autoscaled regions only)
    drained: list[str] = ()  # hosts asked to drain that take no work and run nothing now
    incarnation: str | None = None  # the push this is: deltas that follow build on it
    seq: int | None = None



class RegionPushes:
    def __init__(self, autoscale: Iterable[RegionScaling], now: float, incarnation: str = "c0"):
        # Each region's inventory as last pushed and what changed since (gangs/inventory.py);
        # `incarnation` names this controller's pushes apart from a previous one's. The
        # pushes queued wait in `outbox`, to go before any gang round that relies on them.
        self.inventory = inventory.InventoryState(incarnation)
        self.outbox: list[SyncRegion | SyncDelta] = []
        # Autoscaled regions: their groups, their last reports, the demand routed to them.
        self.region_groups = {r.region: list(r.groups) for r in autoscale}
        self.reports: dict[str, dict] = {}
        self.unmet: dict[str, dict[str, int]] = {}
        # Hosts whose idle slice a region is about to delete (host -> slice), or that had a
        # preemption notice: nothing new is placed on them (drain, then delete: work is never
        # started on a dying slice).
        self.draining: dict[str, str] = {}
        # Hosts whose inventory facts may have changed since the last push (touch), when it
        # was, and when each region last got its whole inventory.
        self._touched: set[str] = set()
        self._synced_at = float("-inf")
        self._full_at: dict[str, float] = {}
        self._keepalive_at = now

    def touch(self, hosts: Iterable[str]) -> None:
        """These hosts' inventory facts may have changed (registered, lost, an attempt
        started or ended there, a stop began or ended, a drain): the next push looks."""
        self._touched.update(hosts)

    def touch_effects(self, effects: list) -> None:
        """Hosts whose attempts the kernel changed: every attempt it adds to or takes off a
        worker is in a Persist (lifecycle.Tx.touch); stops name their worker."""
        for e in effects:
            if isinstance(e, ev.Persist):
                self._touched.update(a.worker_id for a in e.attempts)
            elif isinstance(e, ev.StartAttempt | ev.StopAttempt):
                self._touched.add(e.worker_id)

    def sync(self, state: KernelState, workers: Mapping[str, WorkerInfo],
             stopping: Mapping[str, Mapping], now: float, force: bool = False) -> None:
        """Push each region what changed in its inventory (at most every SYNC_EVERY_S, and
        at once before a gang round that relies on it): the hosts touched since the last
        push are looked at again (O(1) each), never the whole fleet. A region due its whole
        inventory gets it at most every SYNC_S_PER_HOST x its hosts (or when forced)."""
        if not force and now - self._synced_at < SYNC_EVERY_S:
            return
        touched, self._touched = self._touched, set()
        self.note_hosts(
            inventory.HostIs(h, inventory.host_facts(state, workers[h], stopping, self.draining))
            if h in workers else inventory.HostGone(h) for h in sorted(touched))
        fulls = [r for r, hosts in self.full_due({*self.unmet, *self.region_groups}).items()
                 if force or now - self._full_at.get(r, float("-inf"))
                 >= max(SYNC_EVERY_S, SYNC_S_PER_HOST * hosts)]
        self._full_at.update(dict.fromkeys(fulls, now))
        keepalive = now - self._keepalive_at >= KEEPALIVE_S
        if keepalive:
            self._keepalive_at = now
        queued = len(self.outbox)
        self.push_regions(self.unmet, self.region_groups, fulls, keepalive)
        if len(self.outbox) > queued:  # else the next change goes out at once
            self._synced_at = now

    def note_hosts(self, events: Iterable[inventory.HostIs | inventory.HostGone]) -> None:
        """What is true now of hosts that may have changed (inventory.handle), O(1) each."""
        for event in events:
            inventory.handle(self.inventory, event)

    def full_due(self, also: Iterable[str] = ()) -> dict[str, int]:
        """Regions that must be sent their whole inventory -> how many hosts that is.
        `also`: regions to know of even without hosts (new ones are due a full push)."""
        for region in also:
            inventory.region(self.inventory, region)
        return {r: inventory.size(self.inventory, r) for r in inventory.full_due(self.inventory)}

    def push_failed(self, region: str, seq: int) -> bool:
        """A push to `region` was refused or lost: True if a full one is now due."""
        return inventory.refused(self.inventory, region, seq)

    def push_regions(self, unmet: Mapping[str, dict[str, int]], regions: Iterable[str] = (),
                     fulls: Iterable[str] = (), keepalive: bool = False) -> None:
        """Queue what changed in each region since its last push (a SyncDelta), or its whole
        inventory (a SyncRegion) for those in `fulls` that need one. A region due a full
        push that is not in `fulls` waits (it would refuse a delta). `regions`: ones to push
        even without hosts (autoscaled regions not grown yet). `keepalive`: an empty delta
        to a region with no change (one that lost our pushes refuses it)."""
        fulls, state = set(fulls), self.inventory
        for region in sorted(set(state.regions) | set(unmet) | set(regions)):
            due = inventory.region(state, region).full_due
            if due and region not in fulls:
                continue
            out = inventory.push(state, region, unmet.get(region, {}), full=due, keepalive=keepalive)
            if isinstance(out, inventory.Full):
                self.outbox.append(SyncRegion(region, out.slices, out.busy, out.unmet,
                                              out.drained, out.incarnation, out.seq))
            elif out is not None:
                self.outbox.append(out)

    def sync_regions(self, state: KernelState, workers: Iterable[WorkerInfo],
                     stopping: dict[str, dict[str, Resources]],
                     unmet: Mapping[str, dict[str, int]] | None = None,
                     regions: Iterable[str] = (), draining: Iterable[str] = ()) -> None:
        """Push every region from scratch: every worker's facts (O(fleet); the service
        feeds `note_hosts` with the hosts that changed instead), then `push_regions`."""
        workers, draining = list(workers), set(draining)
        here = {w.worker_id for w in workers}
        self.note_hosts([inventory.HostGone(h) for h in list(self.inventory.hosts) if h not in here])
        self.note_hosts(inventory.HostIs(w.worker_id, inventory.host_facts(state, w, stopping, draining))
                        for w in workers)
        unmet = unmet or {}
        self.push_regions(unmet, regions, fulls=self.full_due({*unmet, *regions}))

    def regions(self) -> list[str]:
        return sorted(self.inventory.regions)

    def take_outbox(self) -> list[SyncRegion | SyncDelta]:
        """The inventory pushes queued since the last take, in order."""
        out, self.outbox = self.outbox, []
        return out

    def set_reports(self, reports: dict[str, dict]) -> bool:
        """The Region actors' latest stats; True when what is scaling or held back changed
        (reasons and routing depend on it)."""
        def scaling(reps: dict) -> dict:
            return {r: (rep.get("scaling_up"), rep.get("blocked")) for r, rep in reps.items()}
        changed = scaling(reports) != scaling(self.reports)
        self.reports = dict(reports)
        return changed

    def gone_in_reports(self) -> dict[str, str]:
        """Hosts the regions' reports say were deleted (host -> why)."""
        return {h: str(why) for rep in self.reports.values()
                for h, why in rep.get("gone_hosts", {}).items()}

    def forget_region(self, region: str) -> None:
        """A region reclaimed (reclaim.py): its inventory, push numbers, sync times and
        report are forgotten."""
        self.inventory.regions.pop(region, None)
        self._full_at.pop(region, None)
        self.reports.pop(region, None)

    def drain(self, hosts: Mapping[str, str]) -> None:
        self.draining.update(hosts)
        self.touch(hosts)

    def undrain(self, hosts: Iterable[str]) -> None:
        hosts = list(hosts)
        for host in hosts:
            self.draining.pop(host, None)
        self.touch(hosts)

    def scaling_up(self) -> dict:
        return demand.scaling_up(self.reports)

    def route_demand(self, unplaced: list, reasons: dict) -> None:
        """Work no region has room for, (spec, tasks) pairs: the autoscalers' demand."""
        self.unmet = demand.plan_growth(unplaced, self.region_groups, self.reports,
                                        reasons) if self.region_groups and unplaced else {}

    def capacity(self) -> list:
        return [rep["capacity"] for _, rep in sorted(self.reports.items()) if "capacity" in rep]


def region_push(msg: SyncRegion | SyncDelta) -> tuple[str, tuple]:
    """The call that sends a region its inventory: `sync` (control.RegionSync's fields by
    position, as RegionPushes built them: a whole push is O(fleet), so no copy is made) or
    `sync_delta` (a control.RegionDelta, built typed and encoded here)."""
    if isinstance(msg, SyncRegion):
        return "sync", (msg.slices, msg.busy, msg.unmet, list(msg.drained), msg.incarnation,
                        msg.seq)
    return "sync_delta", (control.encode(control.RegionDelta(
        incarnation=msg.incarnation, seq=msg.seq,
        slices=tuple(control.InventorySlice(**row) for row in msg.slices),
        removed=tuple(msg.removed), busy=tuple(msg.busy), free=tuple(msg.free),
        unmet=msg.unmet, drained=tuple(msg.drained), undrained=tuple(msg.undrained))),)
