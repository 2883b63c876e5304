"""The Region actor: one per region, the owner of its reservation ledger and its slices; and
RegionCarrier, how the controller reaches its Region actors.

Not the decisions (gangs/ledger.py and autoscaler.py are pure). Gang requests and replies
are handed over as their types by a controller in this process (`handle_requests`) and
travel as plain dicts (gangs/protocol.py `encode_message`) from one elsewhere (`handle`,
`handle_many`); a malformed one raises ProtocolError at the caller and changes nothing.
Leases lapse on the region's own clock, checked every tick, so a hold the coordinator
forgot (it crashed, a message was lost) is released without anyone asking.

Its inventory (which slices and hosts have registered workers, which are busy) and the
demand routed to it (scale group -> more slices wanted) are pushed by the controller, which
is where workers register: `sync` replaces both whole, `sync_delta` changes what changed
since the push before it (numbered per controller incarnation; one that does not follow
the last push applied here is refused, and the controller sends `sync`). A region with
`RegionScaling` also grows and shrinks its scale groups, drains idle slices before deleting
them and reports the hosts of deleted ones: its RegionSlices (region_slices.py), run on
this actor's turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from iris.actors import Node, actor, tokens
from iris.actors.hosting import requires
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
from iris.controller.providers.base import Provider
from iris.controller.regions.autoscaler import AutoscalerConfig, SliceUsage
from iris.controller.regions.region_slices import RegionSlices
from iris.wire import control

# How long a stop waits for its slices: a local slice stops within its tasks' stop grace
# (10 s) plus its worker's goodbye, a minute covers several on a loaded machine; a cloud
# delete (`iris cluster stop`) takes minutes.
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
        # Its scale groups, drains and hosts gone (region_slices.py), on this turn too.
        self._slices = RegionSlices(region, scaling, clock, controller_address, node)

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
        self._slices.check_groups(msg.unmet)
        self._ledger.set_inventory(specs, list(msg.busy))
        self._hosts = {spec.slice_id: spec.hosts for spec in specs}
        self._busy = set(msg.busy)
        self._pushed = (msg.incarnation, msg.seq) if msg.seq is not None else None
        self._slices.demand(msg.unmet)
        self._drained = set(msg.drained)
        self._slices.settle_drains(self._drained, self._busy)

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
        self._slices.check_groups(msg.unmet or {})
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
            self._slices.demand(msg.unmet)
        self._slices.settle_drains(self._drained, self._busy)

    def inventory(self) -> dict:
        """What this region holds now (O(region)): the last push applied (incarnation,
        seq), slices (id -> hosts), busy and drained hosts, hosts free to reserve."""
        inv = self._ledger.inventory()
        return {"incarnation": self._pushed[0] if self._pushed else None,
                "seq": self._pushed[1] if self._pushed else None,
                "slices": {sid: list(spec.hosts) for sid, spec in inv["slices"].items()},
                "busy": sorted(inv["busy"]), "drained": sorted(self._drained),
                "free_hosts": sorted(inv["free_hosts"]), "unmet": dict(self._slices.unmet)}

    def stats(self) -> dict:
        """Reservation outcomes so far, holds live now and, when autoscaling, the capacity
        report (slices, zone backoffs, decisions with wall-clock `at`), which accelerators
        are scaling up and which are held back (for why-pending)."""
        return {**self._ledger.counts, "live": self.live_reservations(),
                **self._slices.stats()}

    def live_reservations(self) -> int:
        return len(self._ledger.live(self._clock.monotonic()))

    def on_tick(self) -> None:
        now = self._clock.monotonic()
        self._ledger.expire(now)
        self._slices.tick(now, self._usage)

    def slices(self) -> list[dict]:
        """This region's slices as its provider last listed them (`list_slices`, polled
        every poll_interval_s, plus creates and deletes since): `iris slice list`, `iris vm
        status` for every provider, through the Provider protocol."""
        return self._slices.slices()

    @requires()  # the controller, in process: its stop, or an operator's `iris cluster stop`
    def stop_slices(self, in_process_only: bool) -> dict:
        """Stop scaling and delete every slice the provider lists (those of an in-process
        provider only, with `in_process_only`: a controller stopping for a restart keeps its
        cloud slices). Their hosts are reported gone, so their work is requeued now. Returns
        {"region", "deleted": [slice rows], "failed": {slice id: why}, "kept": bool}."""
        return self._slices.stop(in_process_only)

    def on_stop(self) -> None:
        """Stop scaling. Slices stay (a controller restart must not delete a cloud fleet)."""
        self._slices.close()

    def _usage(self) -> dict[str, SliceUsage]:
        """Per slice: hosts registered, and hosts running work or held for a gang."""
        return {sid: SliceUsage(len(hosts), sum(1 for h in hosts if h in self._busy
                                                or self._ledger.holder(h) is not None))
                for sid, hosts in self._hosts.items()}

