"""SliceManager: runs one region's autoscaler decisions against a Provider. Not the decisions.

The kernel (autoscaler.py) decides; this shell feeds it the provider's view and carries out
what it returns. All state is touched on the caller's thread (the Region actor's turn).
Provider calls block (a GCP create can take minutes), so they run on small thread pools, one
per kind of call (creates never hold back a list or a delete); each one's outcome is queued
and folded in at the start of the next `tick`.

The view is the last `list_slices` plus what completed since it was asked for: a list that
started before a create or delete finished cannot show it, so such outcomes stay laid over
the view until a list started after them arrives (a created slice until a list shows it, or
for _LIST_LAG_S). Nothing is decided before the first list
has arrived, so a restarted region adopts the slices it already has instead of creating
duplicates.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import queue
from collections.abc import Callable, Mapping, Sequence

from iris.base.clock import Clock
from iris.base.errors import CapacityError, ConflictError
from iris.base.ids import new_id
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import Provider, SliceInfo, SliceState
from iris.controller.regions.autoscaler import (
    Autoscaler,
    AutoscalerConfig,
    Create,
    Delete,
    SliceUsage,
)

_log = logging.getLogger(__name__)

# A slice whose create succeeded stays in the view this long even if lists do not show it:
# a list API that lags its creates must not make the autoscaler create the slice twice.
# The price is that a slice deleted behind our back within a minute is replaced that late.
_LIST_LAG_S = 60.0


class SliceManager:
    """Owns one region's slices through a Provider; see the module docstring."""

    def __init__(self, region: str, groups: Sequence[ScaleGroupConfig], provider: Provider,
                 clock: Clock, config: AutoscalerConfig | None = None, *,
                 id_prefix: str | None = None, max_workers: int = 4):
        self._groups = {g.name: g for g in groups}
        self._provider = provider
        self._clock = clock
        self._config = config or AutoscalerConfig()
        # A fresh token per start keeps slice ids unique across restarts of the region.
        prefix = id_prefix or f"{region[:35].rstrip('-')}-{new_id(nbytes=2)}"
        self._kernel = Autoscaler(region, list(groups), self._config, id_prefix=prefix)
        # One lane per kind of call: a GCP create holds its thread 5-15 min and a delete 1-3,
        # so in one shared pool a burst of creates left the list (preemptions unseen) and
        # deletes (preempted nodes still count against quota) queued behind them.
        self._pools = {kind: concurrent.futures.ThreadPoolExecutor(
            1 if kind == "list" else max_workers,
            thread_name_prefix=f"iris-scaler-{region}-{kind}")
            for kind in ("create", "delete", "list")}
        self._futures: set[concurrent.futures.Future] = set()
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._view: dict[str, SliceInfo] = {}
        self._creating: dict[str, tuple[str, str]] = {}  # slice id -> (group, zone)
        self._deleting: set[str] = set()
        self._draining: dict[str, Delete] = {}  # idle / retire deletes held for a drain
        self._vanished: list[Delete] = []  # held ones whose slice left the provider's view
        self._gen = 0  # counts completed creates and deletes
        # slice id -> (gen, info or None if deleted, when it completed)
        self._overlay: dict[str, tuple[int, SliceInfo | None, float]] = {}
        self._listing = False
        self._list_gen = 0
        self._listed_once = False
        self._list_asked_at = -math.inf
        self._list_error = ""
        self._dirty = False  # an op completed since the last list was asked for
        self._closed = False

    # ---- the caller's turn -----------------------------------------------------------

    def tick(self, usage: Mapping[str, SliceUsage], unmet: Mapping[str, int], *,
             drain_idle: bool = False) -> list[Create | Delete]:
        """Fold in finished provider calls, decide, start the calls decided on; the
        decisions issued this tick (none until the first list of slices arrived).
        `drain_idle`: idle deletes (and retirements, cause "drain") are not started but
        held, until the caller confirms nothing will be placed on the slice
        (`delete_drained`) or keeps it (`keep`)."""
        if self._closed:
            raise RuntimeError("SliceManager.tick: the manager is closed")
        now = self._clock.monotonic()
        self._fold(now)
        self._maybe_list(now)
        if not self._listed_once:
            return []
        for sid in [s for s in self._draining if s not in self._view]:
            self._vanished.append(self._draining.pop(sid))  # ended on its own meanwhile
        decisions = self._kernel.decide(now, self.slices(), usage, unmet)
        for d in decisions:
            if isinstance(d, Create):
                self._creating[d.slice_id] = (d.group, d.zone)
                self._run("create", d.slice_id, self._provider.create_slice,
                          self._groups[d.group], d.zone, d.slice_id)
            elif drain_idle and d.cause in ("idle", "drain"):
                self._draining[d.slice_id] = d
            else:
                self._delete(d.slice_id)
        return decisions

    def draining(self) -> dict[str, Delete]:
        """Idle deletes held until their slice is drained (slice id -> decision)."""
        return dict(self._draining)

    def take_vanished(self) -> list[Delete]:
        """Held deletes whose slice the provider no longer lists (its hosts went with it),
        each returned once."""
        out, self._vanished = self._vanished, []
        return out

    def delete_drained(self, slice_id: str) -> None:
        """Nothing will be placed on the slice any more: delete it now."""
        if self._draining.pop(slice_id, None) is not None:
            self._delete(slice_id)

    def keep(self, slice_id: str, why: str) -> None:
        """Work reached the slice before the drain did: it stays (decided again later)."""
        if self._draining.pop(slice_id, None) is not None:
            self._kernel.delete_failed(slice_id, why, self._clock.monotonic())

    def _delete(self, slice_id: str) -> None:
        self._deleting.add(slice_id)
        self._run("delete", slice_id, self._provider.delete_slice, slice_id)

    def slices(self) -> list[SliceInfo]:
        """The latest known slices: the provider's, plus creates in flight as CREATING."""
        out = list(self._view.values())
        out += [SliceInfo(sid, group, zone, SliceState.CREATING, detail="create in flight")
                for sid, (group, zone) in self._creating.items() if sid not in self._view]
        return out

    def status(self) -> dict:
        """Autoscaler.status plus the provider calls in flight and the last list error."""
        now = self._clock.monotonic()
        out = self._kernel.status(now)
        out["in_flight"] = {"creates": sorted(self._creating), "deletes": sorted(self._deleting),
                            "draining": sorted(self._draining), "listing": self._listing}
        out["list_error"] = self._list_error
        return out

    def scaling_up(self) -> dict[str, list[str]]:
        return self._kernel.scaling_up(self._clock.monotonic())

    def blocked(self) -> dict[str, str]:
        return self._kernel.blocked(self._clock.monotonic())

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait until every provider call started so far has finished (its outcome is folded
        in by the next tick). True if they all did within `timeout` seconds."""
        _, pending = concurrent.futures.wait(self._futures, timeout)
        self._futures = set(pending)
        return not pending

    def close(self) -> None:
        """Stop the pools, waiting for calls already running; slices are left as they are."""
        self._closed = True
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)

    # ---- provider calls -----------------------------------------------------------------

    def _run(self, kind: str, slice_id: str, fn: Callable, *args) -> None:
        def call() -> None:
            try:
                value = fn(*args)
            except Exception as exc:  # every outcome goes back to the caller's thread
                value = exc
            self._results.put((kind, slice_id, value))

        self._futures = {f for f in self._futures if not f.done()}
        self._futures.add(self._pools[kind].submit(call))

    def _maybe_list(self, now: float) -> None:
        if self._listing or not (self._dirty or
                                 now - self._list_asked_at >= self._config.poll_interval_s):
            return
        self._listing, self._dirty = True, False
        self._list_asked_at, self._list_gen = now, self._gen
        self._run("list", "", self._provider.list_slices)

    def _fold(self, now: float) -> None:
        while True:
            try:
                kind, sid, value = self._results.get_nowait()
            except queue.Empty:
                return
            if kind == "list":
                self._folded_list(now, value)
            elif kind == "create":
                self._folded_create(now, sid, value)
            else:
                self._folded_delete(now, sid, value)

    def _folded_list(self, now: float, value: list[SliceInfo] | Exception) -> None:
        self._listing = False
        if isinstance(value, Exception):
            self._list_error = f"{type(value).__name__}: {value}"
            _log.warning("list_slices failed (keeping the last view): %s", self._list_error)
            return
        view = {s.slice_id: s for s in value}
        for sid, (gen, info, at) in list(self._overlay.items()):
            if gen <= self._list_gen and (info is None or sid in view
                                          or now - at >= _LIST_LAG_S):
                del self._overlay[sid]  # this list was asked for after it: it knows
            elif info is None:
                view.pop(sid, None)
            else:
                view.setdefault(sid, info)
        self._view, self._listed_once, self._list_error = view, True, ""

    def _folded_create(self, now: float, sid: str, value: SliceInfo | Exception) -> None:
        group, zone = self._creating.pop(sid)
        self._dirty = True
        if isinstance(value, ConflictError):  # a retry of a create that happened: adopt it
            value = SliceInfo(sid, group, zone, SliceState.CREATING, detail=str(value))
        if isinstance(value, Exception):
            _log.warning("create %s in %s failed: %s", sid, zone, value)
            self._kernel.create_failed(group, zone, str(value),
                                       isinstance(value, CapacityError), now, slice_id=sid)
            value = None  # nothing left behind (the contract), though GCP listed it CREATING
        self._gen += 1
        if value is None:  # so a list asked while it ran cannot bring back a ghost slice
            self._view.pop(sid, None)
        else:
            self._view[sid] = value
        self._overlay[sid] = (self._gen, value, now)

    def _folded_delete(self, now: float, sid: str, value: None | Exception) -> None:
        self._deleting.discard(sid)
        self._dirty = True
        if isinstance(value, Exception):
            _log.warning("delete %s failed: %s", sid, value)
            self._kernel.delete_failed(sid, str(value), now)
            return
        self._gen += 1
        self._view.pop(sid, None)
        self._overlay[sid] = (self._gen, None, now)


__all__ = ["SliceManager"]
