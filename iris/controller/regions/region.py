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

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from iris.actors import Node, actor, tokens
from iris.actors.hosting import HostedActor, requires
from iris.actors.keys import region_key
from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import (
    ConflictError,
    InvalidRequestError,
    PeerUnavailableError,
    ProtocolError,
)
from iris.controller.config import ScaleGroupConfig
from iris.controller.gangs.ledger import ReservationLedger, SliceSpec
from iris.controller.gangs.protocol import (
    RegionReply,
    RegionRequest,
    SendRegion,
    decode_message,
    encode_message,
)
from iris.controller.providers.base import Provider
from iris.controller.region_pushes import SyncDelta, SyncRegion, region_push
from iris.controller.regions.autoscaler import AutoscalerConfig, SliceUsage
from iris.controller.regions.region_slices import RegionSlices
from iris.wire import control

_log = logging.getLogger(__name__)
# Region calls fail after this long; the coordinator resends on its own schedule anyway.
_CALL_TIMEOUT_S = 10.0

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



class RegionReplies(Protocol):
    """Where a region's answers go: the service's requests (on the owner's turn)."""

    def gang_replies(self, region: str, replies: Any) -> None: ...

    def gang_region_down(self, region: str, why: Any) -> None: ...

    def inventory_push_failed(self, region: str, seq: int, why: str) -> None: ...


class RegionCarrier:
    """The controller's Region actors, made on first use (`ensure_region`, hosted by this
    node) or elsewhere (`regions`: their addresses; `auth`: what they require): carries
    their inventories (`push`) and gang requests (`send`) and the answers back. To a Region
    actor this node hosts, onto its turn as they are (no call through the node's own
    address); to one in another process, frames in a call: the one place they are encoded
    and the replies decoded (gangs/protocol.py). Answers come back through `post` as
    messages into the owner's mailbox; a failure known at once is reported on the spot, a
    Region actor found stopped is forgotten (made anew on the next push)."""

    def __init__(self, node: Any, post: Callable[..., Any], back: RegionReplies,
                 regions: Mapping[str, str | HostedActor] | None = None,
                 auth: bytes | None = None,
                 scaling: Mapping[str, RegionScaling] | None = None):
        self._node, self._post, self._back, self._auth = node, post, back, auth
        self._scaling = scaling or {}
        self.regions: dict[str, str | HostedActor] = dict(regions or {})
        self.region_stats: dict[str, dict] = {}  # each replaced whole by its region
        self._closed = False

    def close(self) -> None:
        """Carry nothing more (the owner is stopping)."""
        self._closed = True

    def carry(self, effect: SendRegion | SyncRegion | SyncDelta) -> None:
        """One of the service's effects for a region, in the order it came."""
        if isinstance(effect, SendRegion):
            self.send(effect)
        else:
            self.ensure_region(effect.region)
            self.push(effect)

    def send(self, msg: SendRegion) -> None:
        """Gang requests to a region's ledger: as they are onto the turn of one this node
        hosts (`handle_requests`), as frames to one elsewhere (`handle_many`). Its typed
        replies come back as `gang_replies`, a failure as `gang_region_down`."""
        if isinstance(self.regions.get(msg.region), str):
            self._deliver(msg.region, "handle_many",
                          ([encode_message(r) for r in msg.requests],), self._decoded,
                          self._back.gang_region_down)
        else:
            self._deliver(msg.region, "handle_requests", (list(msg.requests),),
                          self._back.gang_replies, self._back.gang_region_down)

    def _decoded(self, region: str, replies: Any) -> None:  # on the owner's turn
        """A remote region's reply frames, decoded; one malformed reply is dropped, not the
        others with it."""
        if not isinstance(replies, list):
            self._back.gang_region_down(
                region, f"expected a list of replies, got {type(replies).__name__}")
            return
        typed = []
        for reply in replies:
            try:
                typed.append(decode_message(reply) if reply is not None else None)
            except ProtocolError as exc:
                _log.warning("region %s sent a malformed gang reply: %s", region, exc)
        self._back.gang_replies(region, typed)

    def push(self, msg: SyncRegion | SyncDelta) -> None:
        """A region's inventory, whole or what changed (`region_push`), in order with the
        gang requests that rely on it; refused or lost: `inventory_push_failed`."""
        method, args = region_push(msg)
        self._deliver(msg.region, method, args, None,
                      lambda region, error, seq=msg.seq: self._push_failed(region, seq, error))

    def _deliver(self, region: str, method: str, args: tuple, answered: Callable | None,
                 failed: Callable) -> None:
        target = self.regions.get(region)
        if self._closed:
            return
        if target is None:
            failed(region, f"no Region actor for {region!r}")
        elif isinstance(target, str):  # a Region actor in another process: a call
            fut = self._node.call(target, region_key(region), method, args,
                                  timeout_s=_CALL_TIMEOUT_S, auth=self._auth)
            fut.add_done_callback(lambda f: self._post(self._called, region, f, answered,
                                                       failed))
        elif not target.post(self._on_region_turn, target, region, method, args, answered,
                             failed):
            # It stopped under us: forgotten here, so that its owner may make it anew (a
            # restarted region, sent its whole inventory: the failure asks for it).
            self.regions.pop(region, None)
            failed(region, f"the Region actor for {region!r} has stopped")

    def ask(self, region: str, method: str, args: tuple = ()) -> concurrent.futures.Future:
        """One request to a Region actor, run on its turn (for one this node hosts, no call
        through the node's own address): its answer, as a future any thread may wait on."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        target = self.regions.get(region)
        if isinstance(target, str) and not self._closed:  # in another process: a call
            call = self._node.call(target, region_key(region), method, args,
                                   timeout_s=_CALL_TIMEOUT_S, auth=self._auth)
            call.add_done_callback(lambda f: fut.set_exception(f.exception())
                                   if f.exception() is not None else fut.set_result(f.result()))
            return fut

        def run() -> None:
            try:
                fut.set_result(getattr(target.instance, method)(*args))
            except Exception as exc:  # the caller sees it, as a failed call
                fut.set_exception(exc)
        if target is None or isinstance(target, str) or not target.post(run):
            fut.set_exception(PeerUnavailableError(f"no Region actor for {region!r} here"))
        return fut

    def _push_failed(self, region: str, seq: int | None, error: object) -> None:
        if seq is not None:
            why = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) \
                else str(error)
            self._back.inventory_push_failed(region, seq, why)

    def _on_region_turn(self, hosted: HostedActor, region: str, method: str, args: tuple,
                        answered: Callable | None, failed: Callable) -> None:
        """On the turn of a Region actor this node hosts: its answer (or failure) comes back
        as a message into the owner's mailbox."""
        try:
            answer = getattr(hosted.instance, method)(*args)
        except Exception as exc:  # as a failed call
            self._post(failed, region, exc)
            return
        if answered is not None:
            self._post(answered, region, answer)

    def _called(self, region: str, fut: Any, answered: Callable | None,
                failed: Callable) -> None:  # on the owner's turn
        error = fut.exception()
        if error is not None:
            failed(region, error)
        elif answered is not None:
            answered(region, fut.result())

    def ensure_region(self, region: str) -> None:
        """A Region actor for `region`, hosted by this node, unless there is one."""
        if region not in self.regions:
            kwargs = {"scaling": self._scaling.get(region),
                      "controller_address": self._node.address, "node": self._node}
            self.regions[region] = self._node.host(
                region_key(region), Region, (region, [], self._node.clock), kwargs)

    async def each_region(self, method: str, args: tuple, timeout_s: float) -> list:
        """One request to every autoscaled region's actor, on its turn; answers in order."""
        futures = [asyncio.wrap_future(self.ask(r, method, args)) for r in sorted(self._scaling)]
        return list(await asyncio.wait_for(asyncio.gather(*futures), timeout_s))

    def ask_region_stats(self) -> None:
        for region in self.regions:
            fut = self.ask(region, "stats")
            fut.add_done_callback(lambda f, r=region: self._got_region_stats(r, f))

    def _got_region_stats(self, region: str, fut: Any) -> None:  # on the region's thread
        if fut.exception() is None and region in self.regions:  # not one reclaimed
            self.region_stats[region] = fut.result()

    def forget_region(self, region: str) -> None:
        """A region reclaimed (reclaim.py): its actor is stopped by the caller; requests
        that still name it are refused there (the coordinator counts it as down)."""
        self.regions.pop(region, None)
        self.region_stats.pop(region, None)
