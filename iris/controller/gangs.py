"""GangPlacer: runs the pure GangCoordinator against real Region actors. A thin shell.

Not the decisions (scheduling/coordinator.py). One thread owns the coordinator: events
(place, release, region replies, due timers) arrive on a queue, are handled in batches, and
the resulting sends go out as one `handle_many` call per region per batch. A failed call is
not retried here: the coordinator's own resend timers and the regions' leases cover lost
messages, which is what the stateful fault test exercises.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from iris.actors import ActorFuture, Node
from iris.actors.keys import region_key
from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.controller.scheduling.coordinator import (
    CoordinatorConfig,
    GangCoordinator,
    GangReleased,
    Placed,
    PlaceGang,
    ReleaseGang,
    Send,
    SetTimer,
    Unplaceable,
)
from iris.controller.scheduling.model import GangShape
from iris.controller.scheduling.wire_format import from_wire, to_wire

_log = logging.getLogger(__name__)
_STOP = object()
# Region calls fail after this long; the coordinator resends on its own schedule anyway.
_CALL_TIMEOUT_S = 10.0


class GangPlacer:
    def __init__(self, node: Node, regions: dict[str, str], *, clock: Clock = SYSTEM_CLOCK,
                 config: CoordinatorConfig | None = None,
                 on_placed: Callable[[Placed], Any] | None = None,
                 on_unplaceable: Callable[[Unplaceable], Any] | None = None,
                 on_released: Callable[[GangReleased], Any] | None = None,
                 auth: bytes | None = None):
        """`regions` maps a region name to the address of the node serving its actor;
        `auth`: the cluster token that Region actors in other processes require."""
        self._node = node
        self._auth = auth
        self._regions = dict(regions)
        self._clock = clock
        self._coordinator = GangCoordinator(config or CoordinatorConfig())
        self._callbacks = {Placed: on_placed, Unplaceable: on_unplaceable,
                           GangReleased: on_released}
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._timers: list[tuple[float, int, Any]] = []
        self._timer_seq = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="iris-gangs")

    def start(self) -> GangPlacer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._events.put(_STOP)
        self._thread.join()

    def add_region(self, region: str, address: str) -> None:
        """Serve gangs in one more region. Call before the first `place` naming it (a dict
        store is atomic, and the placer thread reads it only after that place is queued)."""
        self._regions[region] = address

    def place(self, gang_id: str, shape: GangShape, regions: tuple[str, ...]) -> None:
        self._events.put(PlaceGang(gang_id, shape, tuple(regions)))

    def release(self, gang_id: str) -> None:
        self._events.put(ReleaseGang(gang_id))

    # ------------------------------------------------------------ the coordinator's thread

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            now = self._clock.monotonic()
            while self._timers and self._timers[0][0] <= now:
                batch.append(heapq.heappop(self._timers)[2])
            outbox: dict[str, list[dict]] = {}
            for event in batch:
                for effect in self._coordinator.handle(event, now):
                    self._route(effect, outbox)
            for region, messages in outbox.items():
                fut = self._node.call(self._regions[region], region_key(region), "handle_many",
                                      (messages,), timeout_s=_CALL_TIMEOUT_S,
                                      auth=self._auth)
                fut.add_done_callback(lambda f, r=region: self._replied(r, f))

    def _next_batch(self) -> list | None:
        wait = None
        if self._timers:
            wait = max(0.0, self._timers[0][0] - self._clock.monotonic())
        try:
            first = self._events.get(timeout=wait)
        except queue.Empty:
            return []
        batch = [first]
        while True:
            try:
                batch.append(self._events.get_nowait())
            except queue.Empty:
                break
        if any(item is _STOP for item in batch):
            return None
        return batch

    def _route(self, effect: Any, outbox: dict[str, list[dict]]) -> None:
        if isinstance(effect, Send):
            outbox.setdefault(effect.region, []).append(to_wire(effect.request))
        elif isinstance(effect, SetTimer):
            self._timer_seq += 1
            heapq.heappush(self._timers, (effect.at, self._timer_seq, effect.timer))
        else:
            callback = self._callbacks.get(type(effect))
            if callback is not None:
                callback(effect)

    def _replied(self, region: str, fut: ActorFuture) -> None:
        error = fut.exception()
        if error is not None:  # lost: the coordinator's timers resend, leases expire
            _log.warning("gang requests to region %s failed: %s", region, error)
            return
        for reply in fut.result():
            if reply is not None:
                self._events.put(from_wire(reply))
