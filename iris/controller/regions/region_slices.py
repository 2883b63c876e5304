"""A Region actor's slices: growing and shrinking its scale groups, draining an idle slice
before deleting it, and telling the controller which hosts went. An object the Region
actor (region.py) owns and calls on its own turn; not the reservations (the Region's
ledger) nor the decisions (autoscaler.py, through scaler.py's SliceManager, whose
provider calls run off the Region's thread).

An idle slice is drained before it is deleted: the region asks the controller
(`drain_hosts`) to place nothing more there and deletes only once a sync reports its hosts
run nothing; work that got there first keeps it (`undrain_hosts`). Hosts of any deleted
slice are reported at once (`hosts_gone`) so their work is requeued.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import TYPE_CHECKING

from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import Clock
from iris.base.errors import InvalidRequestError
from iris.controller.providers.base import Provider, SliceInfo
from iris.controller.regions.autoscaler import Delete, SliceUsage
from iris.controller.regions.scaler import SliceManager

if TYPE_CHECKING:
    from iris.actors import Node
    from iris.controller.regions.region import RegionScaling

_GONE_KEPT_S = 60.0
_DECIDE_EVERY_S = 0.5
# A drain the controller has not confirmed by then is abandoned (the slice is kept and
# decided on again later): the controller answers within one sync, normally milliseconds.
_DRAIN_TIMEOUT_S = 30.0
# Slices deleted at once by `stop`: a cloud delete takes minutes, a local one the stop
# grace of its tasks; 8 keeps a stop of a few dozen slices within one of those.
_DELETE_THREADS = 8


class RegionSlices:
    """One region's scale groups and what it told the controller (see the module
    docstring). Without `scaling` it only checks that no demand names a group."""

    def __init__(self, region: str, scaling: RegionScaling | None, clock: Clock,
                 controller_address: str = "", node: Node | None = None):
        self.region = region
        self._clock = clock
        self.unmet: dict[str, int] = {}  # scale group -> more slices wanted
        # Hosts of slices this region deleted (preempted, lost a host, idle...) -> (when,
        # why): reported so the controller requeues their work now, not after the 3 s
        # heartbeat timeout. Kept a minute, long past the next stats poll.
        self._gone: dict[str, tuple[float, str]] = {}
        self._node, self._controller = node, controller_address
        self._drain_started: dict[str, float] = {}  # slice id -> when its drain was asked
        # Deciding walks every slice (37 ms at 10,000 slices): twice a second is plenty for
        # delays of seconds to minutes, while leases are still checked every tick.
        self._next_decide = 0.0
        self.manager: SliceManager | None = None
        self._groups = {g.name for g in scaling.groups} if scaling is not None else set()
        self._provider: Provider | None = None
        self._in_process = scaling is not None and scaling.in_process
        if scaling is not None:
            self._provider = scaling.provider(controller_address)
            self.manager = SliceManager(region, scaling.groups, self._provider, clock,
                                        scaling.autoscaler)

    def check_groups(self, unmet: dict) -> None:
        unknown = sorted(set(unmet) - self._groups)
        if unknown:
            raise InvalidRequestError(
                f"unmet: no scale group {unknown[0]!r} in this region (its groups: "
                f"{', '.join(sorted(self._groups)) or 'none'})", "unmet")

    def demand(self, unmet: dict) -> None:
        if any(n > self.unmet.get(g, 0) for g, n in unmet.items()):
            self._next_decide = 0.0  # more demand is acted on at the next tick
        self.unmet = dict(unmet)

    def stats(self) -> dict:
        """The capacity report (slices, zone backoffs, decisions with wall-clock `at`),
        which accelerators are scaling up and which are held back; {} when not scaling."""
        if self.manager is None:
            return {}
        status = self.manager.status()
        wall = self._clock.wall()
        for d in status.get("decisions", []):
            d["at"] = wall - d.get("ago_s", 0.0)
        return {"capacity": status, "scaling_up": self.manager.scaling_up(),
                "blocked": self.manager.blocked(),
                "gone_hosts": {h: why for h, (_, why) in self._gone.items()}}

    def tick(self, now: float, usage: Callable[[], dict[str, SliceUsage]]) -> None:
        """Decide (at most every _DECIDE_EVERY_S) on what each slice's hosts are doing."""
        if self.manager is None or now < self._next_decide:
            return
        self._next_decide = now + _DECIDE_EVERY_S
        gone, drain = {}, {}
        # Idle slices are drained before they are deleted (when a controller can confirm):
        # work placed on a slice that is going away would be lost with it.
        for d in self.manager.tick(usage(), self.unmet, drain_idle=self._node is not None):
            if not isinstance(d, Delete):
                continue
            if d.slice_id in self.manager.draining():
                if d.cause == "idle":  # a retirement waits as long as its work runs
                    self._drain_started[d.slice_id] = now
                drain.update(dict.fromkeys(d.hosts, d.slice_id))
            else:
                gone.update({h: f"slice {d.slice_id} deleted: {d.reason}" for h in d.hosts})
        for d in self.manager.take_vanished():
            self._drain_started.pop(d.slice_id, None)
            gone.update({h: f"slice {d.slice_id} ended while draining" for h in d.hosts})
        if drain:
            self._tell("drain_hosts", drain)
        for sid, started in list(self._drain_started.items()):
            if now - started > _DRAIN_TIMEOUT_S:  # never confirmed: keep the slice
                self._keep(sid, "the controller did not confirm the drain")
        self._went(gone, now)
        for host in [h for h, (at, _) in self._gone.items() if now - at > _GONE_KEPT_S]:
            del self._gone[host]

    def settle_drains(self, drained: set[str], busy: set[str]) -> None:
        """After a push: delete the draining slices whose hosts run nothing now, keep an
        idle one that work reached first."""
        if self.manager is None:
            return
        now = self._clock.monotonic()
        for sid, d in self.manager.draining().items():
            if d.hosts and all(h in drained for h in d.hosts):
                self._drain_started.pop(sid, None)
                self.manager.delete_drained(sid)
                self._went({h: f"slice {sid} deleted: {d.reason}" for h in d.hosts}, now)
            elif d.cause == "idle" and any(h in busy for h in d.hosts):
                self._keep(sid, "work reached it before the drain")

    def _keep(self, slice_id: str, why: str) -> None:
        d = self.manager.draining().get(slice_id)
        self._drain_started.pop(slice_id, None)
        self.manager.keep(slice_id, why)
        if d is not None:
            self._tell("undrain_hosts", list(d.hosts))

    def _went(self, gone: dict[str, str], now: float) -> None:
        if gone:  # tell the controller now, not at its next stats poll
            self._tell("hosts_gone", gone)
        self._gone.update({h: (now, why) for h, why in gone.items()})

    def _tell(self, method: str, arg: object) -> None:
        if self._node is not None:
            self._node.call(self._controller, CONTROLLER_KEY, method, (arg,), oneway=True)

    def slices(self) -> list[dict]:
        """This region's slices as its provider last listed them (`list_slices`, polled
        every poll_interval_s, plus creates and deletes since)."""
        if self.manager is None:
            return []
        return [slice_row(self.region, info) for info in
                sorted(self.manager.slices(), key=lambda i: i.slice_id)]

    def stop(self, in_process_only: bool) -> dict:
        """Stop scaling and delete every slice the provider lists (those of an in-process
        provider only, with `in_process_only`); their hosts are reported gone (Region's
        `stop_slices`)."""
        out: dict = {"region": self.region, "deleted": [], "failed": {}, "kept": False}
        if self.manager is None or (in_process_only and not self._in_process):
            out["kept"] = self.manager is not None
            return out
        self.manager.close()  # no decision after this one; calls in flight finish first
        self.manager = None
        listed = self._provider.list_slices()
        with concurrent.futures.ThreadPoolExecutor(_DELETE_THREADS) as pool:
            outcomes = list(pool.map(_delete, [self._provider] * len(listed),
                                     [i.slice_id for i in listed]))
        for info, error in zip(listed, outcomes, strict=True):
            if error:
                out["failed"][info.slice_id] = error
            else:
                out["deleted"].append(slice_row(self.region, info))
        gone = {h["host_id"]: f"slice {r['slice_id']} deleted: the cluster is stopping"
                for r in out["deleted"] for h in r["hosts"]}
        self._went(gone, self._clock.monotonic())
        return out

    def close(self) -> None:
        """Stop scaling; the provider's close releases its client (and stops local worker
        processes). Slices stay: a controller restart must not delete a cloud fleet."""
        if self.manager is not None:
            self.manager.close()
        if self._provider is not None:
            self._provider.close()


def slice_row(region: str, info: SliceInfo) -> dict:
    """One slice as the CLI and the wire show it (the same for every provider)."""
    return {"region": region, "slice_id": info.slice_id, "group": info.group,
            "zone": info.zone, "state": info.state.value, "detail": info.detail,
            "hosts": [{"host_id": h.host_id, "address": h.address} for h in info.hosts]}


def _delete(provider: Provider, slice_id: str) -> str:
    """"" once deleted, else why not."""
    try:
        provider.delete_slice(slice_id)
    except Exception as exc:  # every slice is tried; each failure is named to the operator
        return f"{type(exc).__name__}: {exc}"
    return ""
