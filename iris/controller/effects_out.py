"""The Controller actor's side of effects: acting on the one list of effects the service
hands out after each turn (controller/service.py `take_effects`).

Not decisions: region inventories and gang frames go to the Region actors this node hosts
(made on first use), start and stop commands to workers with the cluster token, finished
jobs wake their waiters on the loop. An object the Controller actor owns: it holds the
Region actors it made and their last stats, and reaches the actor only through what it was
handed (node, the command token per worker, `post` onto the actor's turn, `wake` for
waiters, and `back`: the service's requests that replies and failures come back as).

`RegionCarrier` carries frames to Region actors and their replies back, nothing more: onto
the turn of a Region actor this node hosts (no call through the node's own address), or as
a call to one in another process. Each reply comes back through `post` as a message into
the owner's mailbox; a failure known at once (no such region, its actor stopping) is
reported on the spot, and a Region actor found stopped is forgotten (EffectsOut makes it
anew on the next push).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from iris.actors.hosting import HostedActor
from iris.actors.keys import region_key, worker_key
from iris.base.errors import PeerUnavailableError
from iris.controller.gangs.tracking import SendRegion, SyncDelta, SyncRegion
from iris.controller.regions.region import Region, RegionScaling
from iris.controller.service_types import Command, JobsFinished
from iris.wire import control

_log = logging.getLogger(__name__)
# Region calls fail after this long; the coordinator resends on its own schedule anyway.
_CALL_TIMEOUT_S = 10.0


class RegionReplies(Protocol):
    """Where a region's answers go: the service's requests (on the owner's turn)."""

    def gang_replies(self, region: str, replies: Any) -> None: ...

    def gang_region_down(self, region: str, why: Any) -> None: ...

    def inventory_push_failed(self, region: str, seq: int, why: str) -> None: ...


class RegionCarrier:
    """Frames to Region actors, replies back (see the module docstring). `regions`: region
    -> the actor this node hosts, or the address of the node serving it; `auth`: what a
    Region actor in another process requires (the controller's token)."""

    def __init__(self, node: Any, post: Callable[..., Any], back: RegionReplies,
                 regions: Mapping[str, str | HostedActor] | None = None,
                 auth: bytes | None = None):
        self._node, self._post, self._back, self._auth = node, post, back, auth
        self.regions: dict[str, str | HostedActor] = dict(regions or {})
        self._closed = False

    def close(self) -> None:
        """Carry nothing more (the owner is stopping)."""
        self._closed = True

    def send(self, msg: SendRegion) -> None:
        """Gang frames to a region's ledger (`handle_many`); its replies come back as
        `gang_replies`, a failure as `gang_region_down`."""
        self._deliver(msg.region, "handle_many", (list(msg.requests),),
                      self._back.gang_replies, self._back.gang_region_down)

    def push(self, msg: SyncRegion | SyncDelta) -> None:
        """A region's inventory, whole or what changed (`region_push`), in order with the
        gang frames that rely on it; refused or lost: `inventory_push_failed`."""
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


class EffectsOut:
    """Sends what the service decided (see the module docstring)."""

    def __init__(self, node: Any, command_token: Callable[[str], bytes],
                 scaling: Mapping[str, RegionScaling], post: Callable[..., None],
                 wake: Callable[[list[str]], None], back: RegionReplies,
                 remote: Mapping[str, str] | None = None, auth: bytes | None = None):
        self._node = node
        self._command_token = command_token  # what it presents to each worker
        self._scaling = scaling
        self._wake = wake
        # `remote`: regions whose actor another node serves (regions/remote.py), called
        # with `auth`, the controller's own token.
        self.remote = dict(remote or {})
        self.carrier = RegionCarrier(node, post, back, regions=self.remote, auth=auth)
        self.region_stats: dict[str, dict] = {}  # each replaced whole by its region

    @property
    def regions(self) -> set[str]:
        """The regions with a Region actor, served by this node."""
        return set(self.carrier.regions)

    def send(self, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, SyncRegion | SyncDelta):
                self.ensure_region(effect.region)
                self.carrier.push(effect)
            elif isinstance(effect, SendRegion):
                self.carrier.send(effect)
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

    def ensure_region(self, region: str) -> None:
        if region not in self.carrier.regions:
            kwargs = {"scaling": self._scaling.get(region),
                      "controller_address": self._node.address, "node": self._node}
            self.carrier.regions[region] = self._node.host(
                region_key(region), Region, (region, [], self._node.clock), kwargs)

    async def each_region(self, method: str, args: tuple, timeout_s: float) -> list:
        """One request to every autoscaled region's actor, on its turn; answers in order."""
        futures = [asyncio.wrap_future(self.carrier.ask(r, method, args))
                   for r in sorted(self._scaling)]
        return list(await asyncio.wait_for(asyncio.gather(*futures), timeout_s))

    def ask_region_stats(self) -> None:
        for region in self.carrier.regions:
            fut = self.carrier.ask(region, "stats")
            fut.add_done_callback(lambda f, r=region: self._got_region_stats(r, f))

    def _got_region_stats(self, region: str, fut: Any) -> None:  # on the region's thread
        if fut.exception() is None and region in self.carrier.regions:  # not one reclaimed
            self.region_stats[region] = fut.result()

    def forget_region(self, region: str) -> None:
        """A region reclaimed (reclaim.py): its actor is stopped by the caller; frames that
        still name it are refused there (the coordinator counts it as down)."""
        self.carrier.regions.pop(region, None)
        self.region_stats.pop(region, None)

    def close(self) -> None:
        self.carrier.close()


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
