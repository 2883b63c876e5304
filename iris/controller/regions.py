"""The Region actor: one per region, the owner of that region's reservation ledger.

Not the decisions (scheduling/ledger.py is pure). Requests and replies travel as the wire
dicts of scheduling/wire_format.py; a malformed one raises ProtocolError at the caller and
changes nothing. Leases lapse on the region's own clock, checked every tick, so a hold the
coordinator forgot (it crashed, a message was lost) is released without anyone asking.
Its inventory (which slices and hosts exist, which are busy with other work) is pushed by
the controller, which is where workers register: `sync` replaces it whole.
Autoscaling through a Provider joins this actor later (issue 7).
"""

from __future__ import annotations

from iris.actors import actor
from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError
from iris.controller.scheduling.ledger import ReservationLedger, SliceSpec
from iris.controller.scheduling.wire_format import from_wire, to_wire


@actor
class Region:
    # Lapsed holds are found within this long of their expiry (leases are 10 s).
    tick_interval_s = 0.1

    def __init__(self, region: str, slices: list[SliceSpec], clock: Clock = SYSTEM_CLOCK,
                 boot: str = "0"):
        self.region = region
        self._clock = clock
        self._ledger = ReservationLedger(region, slices, boot=boot)

    def handle(self, message: dict) -> dict | None:
        """One request (reserve / commit / abort / release); its reply, or None."""
        reply = self._ledger.handle(from_wire(message), self._clock.monotonic())
        return to_wire(reply) if reply is not None else None

    def handle_many(self, messages: list[dict]) -> list[dict | None]:
        """Several requests in one call (a coordinator under load batches its sends)."""
        now = self._clock.monotonic()
        replies = [self._ledger.handle(from_wire(m), now) for m in messages]
        return [to_wire(r) if r is not None else None for r in replies]

    def sync(self, slices: list[dict], busy: list[str]) -> None:
        """The region's whole inventory now: slices as {"slice_id", "accelerator", "hosts",
        "attributes"}, and the hosts busy with work placed outside gangs."""
        specs = [_slice_spec(raw) for raw in slices]
        if not isinstance(busy, list) or not all(isinstance(h, str) for h in busy):
            raise InvalidRequestError("busy: expected a list of host ids", "busy")
        self._ledger.set_inventory(specs, busy)

    def stats(self) -> dict:
        """Reservation outcomes so far (reserved / committed / aborted / expired / released)
        and the holds live now."""
        return {**self._ledger.counts, "live": self.live_reservations()}

    def live_reservations(self) -> int:
        return len(self._ledger.live(self._clock.monotonic()))

    def on_tick(self) -> None:
        self._ledger.expire(self._clock.monotonic())


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
