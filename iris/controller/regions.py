"""The Region actor: one per region, the owner of its reservation ledger and its slices.

Not the decisions (scheduling/ledger.py and autoscaler.py are pure). Requests and replies
travel as the wire dicts of scheduling/wire_format.py; a malformed one raises ProtocolError
at the caller and changes nothing. Leases lapse on the region's own clock, checked every
tick, so a hold the coordinator forgot (it crashed, a message was lost) is released
without anyone asking.

Its inventory (which slices and hosts have registered workers, which are busy) and the
demand routed to it (scale group -> more slices wanted) are pushed by the controller, which
is where workers register: `sync` replaces both whole. A region with `RegionScaling` also
grows and shrinks its scale groups: every tick hands the SliceManager what each slice's
hosts are doing, and the manager's provider calls run off this thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from iris.actors import Node, actor
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError
from iris.controller.autoscaler import AutoscalerConfig, Delete, SliceUsage
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import Provider
from iris.controller.scaler import SliceManager
from iris.controller.scheduling.ledger import ReservationLedger, SliceSpec
from iris.controller.scheduling.wire_format import from_wire, to_wire

_GONE_KEPT_S = 60.0
_DECIDE_EVERY_S = 0.5


@dataclass(frozen=True)
class RegionScaling:
    """What a region needs to autoscale: its groups and how to make its provider."""

    region: str
    groups: tuple[ScaleGroupConfig, ...]
    # Called once, with the controller's address (workers it starts must dial it).
    provider: Callable[[str], Provider]
    autoscaler: AutoscalerConfig = field(default_factory=AutoscalerConfig)


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
        self._unmet: dict[str, int] = {}
        # Hosts of slices this region deleted (preempted, lost a host, idle...) -> (when,
        # why): reported so the controller requeues their work now, not after the 3 s
        # heartbeat timeout. Kept a minute, long past the next stats poll.
        self._gone: dict[str, tuple[float, str]] = {}
        self._node, self._controller = node, controller_address
        # Deciding walks every slice (37 ms at 10,000 slices): twice a second is plenty for
        # delays of seconds to minutes, while leases are still checked every tick.
        self._next_decide = 0.0
        self._manager: SliceManager | None = None
        self._groups = {g.name for g in scaling.groups} if scaling is not None else set()
        self._provider: Provider | None = None
        if scaling is not None:
            self._provider = scaling.provider(controller_address)
            self._manager = SliceManager(region, scaling.groups, self._provider, clock,
                                         scaling.autoscaler)

    def handle(self, message: dict) -> dict | None:
        """One request (reserve / commit / abort / release); its reply, or None."""
        reply = self._ledger.handle(from_wire(message), self._clock.monotonic())
        return to_wire(reply) if reply is not None else None

    def handle_many(self, messages: list[dict]) -> list[dict | None]:
        """Several requests in one call (a coordinator under load batches its sends)."""
        now = self._clock.monotonic()
        replies = [self._ledger.handle(from_wire(m), now) for m in messages]
        return [to_wire(r) if r is not None else None for r in replies]

    def sync(self, slices: list[dict], busy: list[str], unmet: dict | None = None) -> None:
        """The region's whole inventory now: slices as {"slice_id", "accelerator", "hosts",
        "attributes"}; the hosts busy with work; `unmet`: scale group -> more slices the
        pending work routed here needs (the autoscaler's demand)."""
        specs = [_slice_spec(raw) for raw in slices]
        hosts = [h for spec in specs for h in spec.hosts]
        if len(hosts) != len(set(hosts)):
            raise InvalidRequestError("slices: a host is listed in two slices", "slices")
        if not isinstance(busy, list) or not all(isinstance(h, str) for h in busy):
            raise InvalidRequestError("busy: expected a list of host ids", "busy")
        unmet = _unmet(unmet or {}, self._groups)
        self._ledger.set_inventory(specs, busy)
        self._hosts = {spec.slice_id: spec.hosts for spec in specs}
        self._busy = set(busy)
        if any(n > self._unmet.get(g, 0) for g, n in unmet.items()):
            self._next_decide = 0.0  # more demand is acted on at the next tick
        self._unmet = unmet

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
        gone = {}
        for d in self._manager.tick(self._usage(), self._unmet):
            if isinstance(d, Delete):
                for host in d.hosts:
                    gone[host] = f"slice {d.slice_id} deleted: {d.reason}"
        if gone and self._node is not None:  # tell the controller now, not at its next poll
            self._node.call(self._controller, CONTROLLER_KEY, "hosts_gone", (gone,),
                            oneway=True)
        self._gone.update({h: (now, why) for h, why in gone.items()})
        for host in [h for h, (at, _) in self._gone.items() if now - at > _GONE_KEPT_S]:
            del self._gone[host]

    def on_stop(self) -> None:
        """Stop scaling. Slices stay (a controller restart must not delete a cloud fleet);
        the provider's close releases its client, and stops local worker processes."""
        if self._manager is not None:
            self._manager.close()
            self._provider.close()

    def _usage(self) -> dict[str, SliceUsage]:
        """Per slice: hosts registered, and hosts running work or held for a gang."""
        return {sid: SliceUsage(len(hosts), sum(1 for h in hosts if h in self._busy
                                                or self._ledger.holder(h) is not None))
                for sid, hosts in self._hosts.items()}


def _unmet(raw: object, groups: set[str]) -> dict[str, int]:
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in raw.items()):
        raise InvalidRequestError(f"unmet: expected scale group -> slices >= 0, got {raw!r:.80}",
                                  "unmet")
    unknown = sorted(set(raw) - groups)
    if unknown:
        raise InvalidRequestError(f"unmet: no scale group {unknown[0]!r} in this region "
                                  f"(its groups: {', '.join(sorted(groups)) or 'none'})", "unmet")
    return dict(raw)


def _slice_spec(raw: object) -> SliceSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("slice_id"), str):
        raise InvalidRequestError(f"slices: expected dicts with a slice_id, got {raw!r:.80}",
                                  "slices")
    hosts = raw.get("hosts")
    if not isinstance(hosts, list | tuple) or not hosts or not all(
            isinstance(h, str) for h in hosts):
        raise InvalidRequestError(f"slices: slice {raw['slice_id']} needs a non-empty list "
                                  "of host ids", "slices")
    accelerator = raw.get("accelerator")
    if accelerator is not None and not isinstance(accelerator, str):
        raise InvalidRequestError(f"slices: accelerator of {raw['slice_id']} must be a string",
                                  "slices")
    return SliceSpec(raw["slice_id"], accelerator, tuple(hosts), dict(raw.get("attributes") or {}))
