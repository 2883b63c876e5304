"""The Controller actor's side of effects: acting on the one list of effects the service
hands out after each turn (controller/service.py `take_effects`).

Not decisions: region inventories go to the Region actors this node hosts (made on first
use), gang rounds to the coordinator (gangs/runner.py) in one batch per turn, start and stop
commands to workers with the cluster token, finished jobs wake their waiters on the loop.
An object the Controller actor owns: it holds the Region actors it made and their last
stats, and reaches the actor only through what it was handed (node, the command token
per worker, gang runner,
`post` onto the actor's turn, `wake` for waiters, `push_failed` for the service).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from iris.actors.keys import region_key, worker_key
from iris.controller.gangs.coordinator import PlaceGang, ReleaseGang
from iris.controller.gangs.runner import GangRunner
from iris.controller.gangs.tracking import PlaceRound, ReleaseRound, SyncDelta, SyncRegion
from iris.controller.regions.region import Region, RegionScaling
from iris.controller.service_types import Command, JobsFinished
from iris.wire import control

_log = logging.getLogger(__name__)


class EffectsOut:
    """Sends what the service decided (see the module docstring)."""

    def __init__(self, node: Any, command_token: Callable[[str], bytes], gangs: GangRunner,
                 scaling: Mapping[str, RegionScaling], post: Callable[..., None],
                 wake: Callable[[list[str]], None],
                 push_failed: Callable[[str, int, str], None]):
        self._node = node
        self._command_token = command_token  # what it presents to each worker
        self._gangs = gangs
        self._scaling = scaling
        self._post = post
        self._wake = wake
        self._push_failed = push_failed
        self.regions: set[str] = set()  # one Region actor each, served by this node
        self.region_stats: dict[str, dict] = {}  # written on the loop by call callbacks

    def send(self, effects: list) -> None:
        rounds = []  # one coordinator batch: one handle_many per region for a whole pass
        for effect in effects:
            if isinstance(effect, SyncRegion | SyncDelta):
                self._sync_region(effect)
            elif isinstance(effect, PlaceRound):
                rounds.append(PlaceGang(effect.round_id.key, effect.shape, effect.regions))
            elif isinstance(effect, ReleaseRound):
                rounds.append(ReleaseGang(effect.round_id.key))
            elif isinstance(effect, ReleaseGang):  # a gang placed for a round since gone
                rounds.append(effect)
            elif isinstance(effect, Command):
                fut = self._node.call(effect.address, worker_key(effect.worker_id),
                                      effect.method, (control.encode(effect.message),),
                                      timeout_s=30.0,
                                      auth=self._command_token(effect.worker_id))
                fut.add_done_callback(_log_failure)
            elif isinstance(effect, JobsFinished):
                self._node.call_in_loop(self._wake, list(effect.job_ids))
            else:
                raise TypeError(f"the controller cannot act on {type(effect).__name__}")
        if rounds:
            self._gangs.handle(rounds)

    def _sync_region(self, msg: SyncRegion | SyncDelta) -> None:
        """Send a region its inventory, whole (`sync`) or what changed (`sync_delta`). A
        push refused (the region restarted, or missed one) or lost is followed by the whole
        inventory (service: inventory_push_failed)."""
        self.ensure_region(msg.region)
        method, args = region_push(msg)
        fut = self._node.call(self._node.address, region_key(msg.region), method, args,
                              timeout_s=30.0)
        fut.add_done_callback(lambda f, m=msg: self._pushed(m, f))

    def _pushed(self, msg: SyncRegion | SyncDelta, fut: Any) -> None:  # any thread
        error = fut.exception()
        if error is not None and msg.seq is not None:
            self._post(self._push_failed, msg.region, msg.seq,
                       f"{type(error).__name__}: {error}")

    def ensure_region(self, region: str) -> None:
        if region not in self.regions:
            kwargs = {"scaling": self._scaling.get(region),
                      "controller_address": self._node.address, "node": self._node}
            hosted = self._node.host(region_key(region), Region,
                                     (region, [], self._node.clock), kwargs)
            self._gangs.add_region(region, hosted)  # in process: onto its turn, no call
            self.regions.add(region)

    def ask_region_stats(self) -> None:
        for region in self.regions:
            fut = self._node.call(self._node.address, region_key(region), "stats",
                                  timeout_s=5.0)
            fut.add_done_callback(lambda f, r=region: self._got_region_stats(r, f))

    def _got_region_stats(self, region: str, fut: Any) -> None:  # on the loop thread
        if fut.exception() is None and region in self.regions:  # (not one reclaimed since)
            self.region_stats[region] = fut.result()

    def forget_region(self, region: str) -> None:
        """A region reclaimed (reclaim.py): its actor is stopped by the caller."""
        self.regions.discard(region)
        self.region_stats.pop(region, None)


def region_push(msg: SyncRegion | SyncDelta) -> tuple[str, tuple]:
    """The call that sends a region its inventory: `sync` (control.RegionSync's fields by
    position, as the tracker built them: a whole push is O(fleet), so no copy is made) or
    `sync_delta` (a control.RegionDelta, built typed and encoded here)."""
    if isinstance(msg, SyncRegion):
        return "sync", (msg.slices, msg.busy, msg.unmet, list(msg.drained), msg.incarnation,
                        msg.seq)
    return "sync_delta", (control.encode(control.RegionDelta(
        incarnation=msg.incarnation, seq=msg.seq,
        slices=tuple(control.InventorySlice(**row) for row in msg.slices),
        removed=tuple(msg.removed), busy=tuple(msg.busy), free=tuple(msg.free),
        unmet=msg.unmet, drained=tuple(msg.drained), undrained=tuple(msg.undrained))),)


def sum_stats(per_region: Any) -> dict:
    """Reservation outcomes over every region (iris_gang_reservations_total)."""
    total = dict.fromkeys(("reserved", "committed", "aborted", "expired", "released"), 0)
    for stats in list(per_region):
        for key in total:
            total[key] += int(stats.get(key, 0))
    return total


def _log_failure(fut: Any) -> None:
    error = fut.exception()
    if error is not None:  # the worker's heartbeat and reconcile repair what a lost call missed
        _log.warning("command to worker failed: %s", error)
