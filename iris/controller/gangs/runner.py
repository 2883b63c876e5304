"""GangRunner: the pure GangCoordinator run against real Region actors on its OWNER's turn.

Not the decisions (coordinator.py). No thread of its own and no queue: every method runs on
the owner's thread (the Controller actor's, in the controller). Requests to a Region actor
this node hosts go onto that actor's turn (no call through the node's own address); to one
elsewhere, as async calls. Each reply comes back through `post` as a message into the
owner's mailbox, where the coordinator handles it. Outcomes (Placed, Unplaceable, GangReleased) go
to `on_outcome`, on that same turn. Requests wait in an outbox until the owner calls
`flush` at the end of a turn with nothing queued behind it (and on its tick), so under load
every reply waiting in the mailbox is handled first and their requests go out together, one
`handle_many` per region (against three Region processes: 1,400 gangs a second when each
reply sent its own, 5,700 batched, as the old placer thread did); nothing is posted to the
owner's own mailbox to get there.
Timers are fired by the owner's tick (`fire_due`): the coordinator's delays are 0.5 s and
up, so a 50 ms tick is fine-grained enough. A failed call is not retried here: the region counts as down for
the gathers waiting on it (RegionDown), the coordinator's resend timers cover commits and
releases, and the regions' leases free any hold whose abort was lost.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable
from typing import Any

from iris.actors import ActorFuture, Node
from iris.actors.hosting import HostedActor
from iris.actors.keys import region_key
from iris.base.clock import Clock
from iris.base.errors import ProtocolError
from iris.controller.gangs.coordinator import (
    CoordinatorConfig,
    GangCoordinator,
    PlaceGang,
    RegionDown,
    ReleaseGang,
    Send,
    SetTimer,
    Timer,
)
from iris.controller.gangs.protocol import decode_message, encode_message
from iris.controller.scheduling.model import GangShape

_log = logging.getLogger(__name__)
# Region calls fail after this long; the coordinator resends on its own schedule anyway.
_CALL_TIMEOUT_S = 10.0


class GangRunner:
    def __init__(self, node: Node, post: Callable[..., Any], clock: Clock, *,
                 regions: dict[str, str] | None = None,
                 config: CoordinatorConfig | None = None,
                 on_outcome: Callable[[Any], Any] = lambda outcome: None,
                 auth: bytes | None = None):
        """`post(fn, *args)` runs fn on the owner's turn (Node.post_to for an actor): how a
        region's reply comes back;
        `regions` maps a region to the address of the node serving its actor; `auth`: the
        cluster token that Region actors in other processes require."""
        self._node, self._post, self._clock, self._auth = node, post, clock, auth
        self._regions: dict[str, str | HostedActor] = dict(regions or {})
        self._coordinator = GangCoordinator(config or CoordinatorConfig())
        self._on_outcome = on_outcome
        self._timers: list[tuple[float, int, Timer]] = []
        self._timer_seq = 0
        self._closed = False
        self._outbox: dict[str, list[dict]] = {}  # region -> requests not sent yet

    def add_region(self, region: str, where: str | HostedActor) -> None:
        """`where`: the address of the node serving the region's actor, or the actor itself
        when this node hosts it (its requests then go onto its turn, not through a call)."""
        self._regions[region] = where

    def remove_region(self, region: str) -> None:
        """A region reclaimed: a round that still names it is refused there."""
        self._regions.pop(region, None)

    def place(self, gang_id: str, shape: GangShape, regions: tuple[str, ...]) -> None:
        self.handle([PlaceGang(gang_id, shape, tuple(regions))])

    def release(self, gang_id: str) -> None:
        self.handle([ReleaseGang(gang_id)])

    def fire_due(self, now: float) -> None:
        """Fire the coordinator timers due by `now` (the owner's tick)."""
        due = []
        while self._timers and self._timers[0][0] <= now:
            due.append(heapq.heappop(self._timers)[2])
        if due:
            self.handle(due, now)

    def pending_timers(self) -> int:
        return len(self._timers)

    def close(self) -> None:
        """Send nothing more (the owner is stopping); replies still arriving are ignored."""
        self._closed = True

    def handle(self, events: Iterable[object], now: float | None = None) -> None:
        """Hand events to the coordinator; send what it asks, one call per region."""
        if self._closed:
            return
        now = self._clock.monotonic() if now is None else now
        for event in events:
            for effect in self._coordinator.handle(event, now):
                if isinstance(effect, Send):
                    self._outbox.setdefault(effect.region, []).append(encode_message(effect.request))
                elif isinstance(effect, SetTimer):
                    self._timer_seq += 1
                    heapq.heappush(self._timers, (effect.at, self._timer_seq, effect.timer))
                else:
                    self._on_outcome(effect)

    def flush(self) -> None:
        """Send what the coordinator asked since the last flush, one call per region (the
        owner's turn, at the end of its queue or on its tick). A region nobody serves
        refuses at once, which may ask the next region: sent in the same flush."""
        while self._outbox and not self._closed:
            outbox, self._outbox = self._outbox, {}
            for region, messages in outbox.items():
                if region in self._regions:
                    self._send(region, messages)
                else:
                    self._failed(region, f"no Region actor for {region!r}")

    def _send(self, region: str, messages: list[dict]) -> None:
        target = self._regions[region]
        if isinstance(target, str):  # a Region actor in another process: a call
            fut = self._node.call(target, region_key(region), "handle_many", (messages,),
                                  timeout_s=_CALL_TIMEOUT_S, auth=self._auth)
            fut.add_done_callback(lambda f: self._post(self._replied, region, f))
        elif not target.post(self._in_region, target, region, messages):
            self._failed(region, f"the Region actor for {region!r} is stopping")

    def _in_region(self, hosted: HostedActor, region: str, messages: list[dict]) -> None:
        """On the turn of a Region actor this node hosts: no call through the node's own
        address; the replies come back as a message into the owner's mailbox."""
        try:
            replies = hosted.instance.handle_many(messages)
        except Exception as exc:  # as a failed call: the region counts as down
            self._post(self._failed, region, exc)
            return
        self._post(self._answered, region, replies)

    def _replied(self, region: str, fut: ActorFuture) -> None:  # on the owner's turn
        error = fut.exception()
        if error is not None:
            self._failed(region, error)
            return
        self._answered(region, fut.result())

    def _answered(self, region: str, replies: Any) -> None:  # on the owner's turn
        if not isinstance(replies, list):
            self._failed(region, f"expected a list of replies, got {type(replies).__name__}")
            return
        events = []
        for reply in replies:
            if reply is None:
                continue
            try:
                events.append(decode_message(reply))
            except ProtocolError as exc:  # one bad reply must not lose the others
                _log.warning("region %s sent a malformed gang reply: %s", region, exc)
        self.handle(events)

    def _failed(self, region: str, error: object) -> None:
        _log.warning("gang requests to region %s failed: %s", region, error)
        self.handle([RegionDown(region)])
