"""The Region actor: one per region, the owner of its reservation ledger and its slices.

Not the decisions (gangs/ledger.py and autoscaler.py are pure). Gang requests and replies
are handed over as their types by a controller in this process (`handle_requests`) and
travel as plain dicts (gangs/protocol.py `encode_message`) from one elsewhere (`handle`,
`handle_many`); a malformed one raises ProtocolError at the caller and changes nothing. Leases lapse on the region's own clock, checked every
tick, so a hold the coordinator forgot (it crashed, a message was lost) is released
without anyone asking.

Its inventory (which slices and hosts have registered workers, which are busy) and the
demand routed to it (scale group -> more slices wanted) are pushed by the controller, which
is where workers register: `sync` replaces both whole, `sync_delta` changes what changed
since the push before it (numbered per controller incarnation; one that does not follow
the last push applied here is refused, and the controller sends `sync`). A region with `RegionScaling` also
grows and shrinks its scale groups: every tick hands the SliceManager what each slice's
hosts are doing, and the manager's provider calls run off this thread. An idle slice is
drained before it is deleted: the region asks the controller (`drain_hosts`) to place
nothing more there and deletes only once a sync reports its hosts run nothing; hosts of
any deleted slice are reported at once (`hosts_gone`) so their work is requeued.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from iris.actors import Node, actor, tokens
from iris.actors.hosting import requires
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import ConflictError, InvalidRequestError
from iris.controller.config import ScaleGroupConfig
from iris.controller.gangs.ledger import ReservationLedger, SliceSpec
from iris.controller.gangs.protocol import (
    RegionReply,
    RegionRequest,
    decode_message,
    encode_message,
)
from iris.controller.providers.base import Provider, SliceInfo
from iris.controller.regions.autoscaler import AutoscalerConfig, Delete, SliceUsage
from iris.controller.regions.scaler import SliceManager
from iris.wire import control

_GONE_KEPT_S = 60.0
_DECIDE_EVERY_S = 0.5
# A drain the controller has not confirmed by then is abandoned (the slice is kept and
# decided on again later): the controller answers within one sync, normally milliseconds.
_DRAIN_TIMEOUT_S = 30.0
# Slices deleted at once by `stop_slices`: a cloud delete takes minutes, a local one the
# stop grace of its tasks; 8 keeps a stop of a few dozen slices within one of those.
_DELETE_THREADS = 8
# How long a stop waits for them: a local slice stops within its tasks' stop grace (10 s)
# plus its worker's goodbye, a minute covers several on a loaded machine; a cloud delete
# (`iris cluster stop`) takes minutes.
STOP_LOCAL_SLICES_S = 60.0
STOP_ALL_SLICES_S = 900.0


@dataclass(frozen=True)
class RegionScaling:
    """What a region needs to autoscale: its groups and how to make its provider."""

    region: str
    groups: tuple[ScaleGroupConfig, ...]
    # Called once, with the controller's address (workers it starts must dial it).
    provider: Callable[[str], Provider]
    autoscaler: AutoscalerConfig = field(default_factory=AutoscalerConfig)
    # The provider's slices live and die with this process (local worker processes, a
    # simulated fleet): a controller that stops stops them first, so their workers say
    # goodbye while it still serves. Cloud and site slices outlive it (a restart adopts them).
    in_process: bool = False


@actor
class Region:
    # Lapsed holds are found within this long of their expiry (leases are 10 s); the
    # autoscaler's own delays are seconds to minutes, so this is fine-grained enough.
    tick_interval_s = 0.1

    def __init__(self, region: str, slices: list[SliceSpec], clock: Clock = SYSTEM_CLOCK,
                 boot: str = "0", scaling: RegionScaling | None = None,
                 controller_address: str = "", node: Node | None = None):
        self.region = region
        self._clock = clock
        self._ledger = ReservationLedger(region, slices, boot=boot)
        self._hosts: dict[str, tuple[str, ...]] = {s.slice_id: s.hosts for s in slices}
        self._busy: set[str] = set()
        self._drained: set[str] = set()
        # (controller incarnation, seq) of the last numbered push applied: a delta must
        # follow it. None: none yet (new, or restarted), so the first push must be whole.
        self._pushed: tuple[str, int] | None = None
        self._unmet: dict[str, int] = {}
        # Hosts of slices this region deleted (preempted, lost a host, idle...) -> (when,
        # why): reported so the controller requeues their work now, not after the 3 s
        # heartbeat timeout. Kept a minute, long past the next stats poll.
        self._gone: dict[str, tuple[float, str]] = {}
        self._node, self._controller = node, controller_address
        self._drain_started: dict[str, float] = {}  # slice id -> when its drain was asked
        # Deciding walks every slice (37 ms at 10,000 slices): twice a second is plenty for
        # delays of seconds to minutes, while leases are still checked every tick.
        self._next_decide = 0.0
        self._manager: SliceManager | None = None
        self._groups = {g.name for g in scaling.groups} if scaling is not None else set()
        self._provider: Provider | None = None
        self._in_process = scaling is not None and scaling.in_process
        if scaling is not None:
            self._provider = scaling.provider(controller_address)
            self._manager = SliceManager(region, scaling.groups, self._provider, clock,
                                         scaling.autoscaler)

    @requires(tokens.CONTROLLER)  # the controller: in process, or holding its own token
    def handle(self, message: dict) -> dict | None:
        """One request (reserve / commit / abort / release); its reply, or None."""
        reply = self._ledger.handle(decode_message(message), self._clock.monotonic())
        return encode_message(reply) if reply is not None else None

    @requires(tokens.CONTROLLER)  # the controller: in process, or holding its own token
    def handle_many(self, messages: list[dict]) -> list[dict | None]:
        """Several requests in one call (a coordinator under load batches its sends)."""
        now = self._clock.monotonic()
        replies = [self._ledger.handle(decode_message(m), now) for m in messages]
        return [encode_message(r) if r is not None else None for r in replies]

    @requires()  # the controller, in process: its requests typed, no frames
    def handle_requests(self, requests: list[RegionRequest]) -> list[RegionReply | None]:
        """`handle_many` for a controller in this process: the same requests and replies,
        handed over as they are (nothing to encode or decode)."""
        now = self._clock.monotonic()
        return [self._ledger.handle(r, now) for r in requests]

    @requires(tokens.CONTROLLER)  # the controller: in process, or holding its own token
    def sync(self, slices: Any, busy: Any, unmet: Any = None, drained: Any = None,
             incarnation: Any = None, seq: Any = None) -> None:
        """The region's whole inventory now: slices as {"slice_id", "accelerator", "hosts",
        "attributes"}; the hosts busy with work; `unmet`: scale group -> more slices the
        pending work routed here needs (the autoscaler's demand); `drained`: hosts asked to
        drain that the controller no longer places on and that run nothing. `incarnation`
        and `seq` number this push: deltas that follow it (sync_delta) apply on top. Checked
        whole (control.RegionSync) before anything changes."""
        msg = control.decode(control.RegionSync, {
            "slices": slices, "busy": busy, "unmet": unmet or {}, "drained": drained or [],
            "incarnation": incarnation, "seq": seq})
        specs = [SliceSpec(s.slice_id, s.accelerator, s.hosts, dict(s.attributes))
                 for s in msg.slices]
        if any(not spec.hosts for spec in specs):
            raise InvalidRequestError("slices: every slice needs a non-empty list of host ids",
                                      "slices")
        hosts = [h for spec in specs for h in spec.hosts]
        if len(hosts) != len(set(hosts)):
            raise InvalidRequestError("slices: a host is listed in two slices", "slices")
        if (msg.incarnation is None) != (msg.seq is None):
            raise InvalidRequestError("seq: give both incarnation and seq, or neither", "seq")
        self._check_groups(msg.unmet)
        self._ledger.set_inventory(specs, list(msg.busy))
        self._hosts = {spec.slice_id: spec.hosts for spec in specs}
        self._busy = set(msg.busy)
        self._pushed = (msg.incarnation, msg.seq) if msg.seq is not None else None
        self._demand(msg.unmet)
        self._drained = set(msg.drained)
        self._settle_drains(self._drained, self._busy)

    @requires(tokens.CONTROLLER)  # the controller: in process, or holding its own token
    def sync_delta(self, delta: Any) -> None:
        """What changed since the last push (control.RegionDelta: slices added or changed,
        slices removed, hosts now busy / free, hosts now drained / not, the demand if it
        changed). Applied only if it follows the last push applied here, else refused with
        ConflictError (the controller then sends the whole inventory: `sync`). Checked
        whole before anything changes."""
        msg = control.decode(control.RegionDelta, delta)
        if self._pushed != (msg.incarnation, msg.seq - 1):
            last = (f"push {self._pushed[1]} of {self._pushed[0]}" if self._pushed
                    else "no numbered push")
            raise ConflictError(
                f"region {self.region}: delta {msg.seq} of {msg.incarnation} does not follow "
                f"the last push applied here ({last}); send the whole inventory (sync)")
        specs = [SliceSpec(s.slice_id, s.accelerator, s.hosts, dict(s.attributes))
                 for s in msg.slices]
        self._check_groups(msg.unmet or {})
        try:
            self._ledger.check_delta(specs, msg.removed, msg.busy, msg.free,
                                     {"drained": msg.drained, "undrained": msg.undrained})
        except ValueError as exc:
            raise InvalidRequestError(str(exc), str(exc).split(":", 1)[0]) from None
        # Hosts leaving the inventory lose their flags here too (O(the slices named)).
        incoming = {h for spec in specs for h in spec.hosts}
        leaving = {h for sid in (*msg.removed, *(s.slice_id for s in specs))
                   for h in self._hosts.get(sid, ()) if h not in incoming}
        self._ledger.apply_delta(specs, msg.removed, msg.busy, msg.free)
        for sid in msg.removed:
            del self._hosts[sid]
        self._hosts.update({spec.slice_id: spec.hosts for spec in specs})
        for flags, off, on in ((self._busy, msg.free, msg.busy),
                               (self._drained, msg.undrained, msg.drained)):
            flags.difference_update(leaving, off)  # in place: O(the hosts named)
            flags.update(on)
        self._pushed = (msg.incarnation, msg.seq)
        if msg.unmet is not None:
            self._demand(msg.unmet)
        self._settle_drains(self._drained, self._busy)

    def inventory(self) -> dict:
        """What this region holds now (O(region)): the last push applied (incarnation,
        seq), slices (id -> hosts), busy and drained hosts, hosts free to reserve."""
        inv = self._ledger.inventory()
        return {"incarnation": self._pushed[0] if self._pushed else None,
                "seq": self._pushed[1] if self._pushed else None,
                "slices": {sid: list(spec.hosts) for sid, spec in inv["slices"].items()},
                "busy": sorted(inv["busy"]), "drained": sorted(self._drained),
                "free_hosts": sorted(inv["free_hosts"]), "unmet": dict(self._unmet)}

    def _check_groups(self, unmet: dict) -> None:
        unknown = sorted(set(unmet) - self._groups)
        if unknown:
            raise InvalidRequestError(
                f"unmet: no scale group {unknown[0]!r} in this region (its groups: "
                f"{', '.join(sorted(self._groups)) or 'none'})", "unmet")

    def _demand(self, unmet: dict) -> None:
        if any(n > self._unmet.get(g, 0) for g, n in unmet.items()):
            self._next_decide = 0.0  # more demand is acted on at the next tick
        self._unmet = dict(unmet)

    def stats(self) -> dict:
        """Reservation outcomes so far, holds live now and, when autoscaling, the capacity
        report (slices, zone backoffs, decisions with wall-clock `at`), which accelerators
        are scaling up and which are held back (for why-pending)."""
        out: dict = {**self._ledger.counts, "live": self.live_reservations()}
        if self._manager is not None:
            status = self._manager.status()
            wall = self._clock.wall()
            for d in status.get("decisions", []):
                d["at"] = wall - d.get("ago_s", 0.0)
            out.update(capacity=status, scaling_up=self._manager.scaling_up(),
                       blocked=self._manager.blocked(),
                       gone_hosts={h: why for h, (_, why) in self._gone.items()})
        return out

    def live_reservations(self) -> int:
        return len(self._ledger.live(self._clock.monotonic()))

    def on_tick(self) -> None:
        self._ledger.expire(self._clock.monotonic())
        now = self._clock.monotonic()
        if self._manager is None or now < self._next_decide:
            return
        self._next_decide = now + _DECIDE_EVERY_S
        gone, drain = {}, {}
        # Idle slices are drained before they are deleted (when a controller can confirm):
        # work placed on a slice that is going away would be lost with it.
        for d in self._manager.tick(self._usage(), self._unmet,
                                    drain_idle=self._node is not None):
            if not isinstance(d, Delete):
                continue
            if d.slice_id in self._manager.draining():
                if d.cause == "idle":  # a retirement waits as long as its work runs
                    self._drain_started[d.slice_id] = now
                drain.update(dict.fromkeys(d.hosts, d.slice_id))
            else:
                gone.update({h: f"slice {d.slice_id} deleted: {d.reason}" for h in d.hosts})
        for d in self._manager.take_vanished():
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

    def _settle_drains(self, drained: set[str], busy: set[str]) -> None:
        if self._manager is None:
            return
        now = self._clock.monotonic()
        for sid, d in self._manager.draining().items():
            if d.hosts and all(h in drained for h in d.hosts):
                self._drain_started.pop(sid, None)
                self._manager.delete_drained(sid)
                self._went({h: f"slice {sid} deleted: {d.reason}" for h in d.hosts}, now)
            elif d.cause == "idle" and any(h in busy for h in d.hosts):
                self._keep(sid, "work reached it before the drain")

    def _keep(self, slice_id: str, why: str) -> None:
        d = self._manager.draining().get(slice_id)
        self._drain_started.pop(slice_id, None)
        self._manager.keep(slice_id, why)
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
        every poll_interval_s, plus creates and deletes since): `iris slice list`, `iris vm
        status` for every provider, through the Provider protocol."""
        if self._manager is None:
            return []
        return [slice_row(self.region, info) for info in
                sorted(self._manager.slices(), key=lambda i: i.slice_id)]

    @requires()  # the controller, in process: its stop, or an operator's `iris cluster stop`
    def stop_slices(self, in_process_only: bool) -> dict:
        """Stop scaling and delete every slice the provider lists (those of an in-process
        provider only, with `in_process_only`: a controller stopping for a restart keeps its
        cloud slices). Their hosts are reported gone, so their work is requeued now. Returns
        {"region", "deleted": [slice rows], "failed": {slice id: why}, "kept": bool}."""
        out: dict = {"region": self.region, "deleted": [], "failed": {}, "kept": False}
        if self._manager is None or (in_process_only and not self._in_process):
            out["kept"] = self._manager is not None
            return out
        self._manager.close()  # no decision after this one; calls in flight finish first
        self._manager = None
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

    def on_stop(self) -> None:
        """Stop scaling. Slices stay (a controller restart must not delete a cloud fleet);
        the provider's close releases its client, and stops local worker processes."""
        if self._manager is not None:
            self._manager.close()
        if self._provider is not None:
            self._provider.close()

    def _usage(self) -> dict[str, SliceUsage]:
        """Per slice: hosts registered, and hosts running work or held for a gang."""
        return {sid: SliceUsage(len(hosts), sum(1 for h in hosts if h in self._busy
                                                or self._ledger.holder(h) is not None))
                for sid, hosts in self._hosts.items()}


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
