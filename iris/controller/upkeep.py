"""The Controller actor's periodic work on its tick, each job at its own interval: the
dashboard's snapshot and the live figures' series, usage series to disk, lost workers'
credentials and idle regions, finished jobs pruned. An object the actor owns (on its
thread); it holds when each job last ran and what the snapshot readers see.

Not the decisions (the service's `tick`, reclaim.py) nor the carrying (regions/region.py's
RegionCarrier, the actor's `_after`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from iris.base.errors import InvalidRequestError, IrisError
from iris.controller.jobs.model import TERMINAL_JOB
from iris.controller.live_figures import series
from iris.controller.reclaim import RegionReclaim
from iris.controller.regions.region import RegionCarrier
from iris.controller.usage import FLUSH_EVERY_S

_log = logging.getLogger(__name__)

# Dashboards see live state at most this old; rebuilding it walks every job (~2 ms at
# 10,000 jobs), so not on every 50 ms tick...
_SNAPSHOT_EVERY_S = 0.5
# ...times one per this many workers: it lists every worker too (~10 us each: 100 ms at
# 10,000, a fifth of a core every 0.5 s), so a big fleet's dashboard is up to 2 s old.
_SNAPSHOT_WORKERS = 2500
# The snapshot is kept fresh while someone read it this recently...
_READERS_S = 10.0
# ...and a read that finds it older than its interval plus this waits for the next build
# (at most _READ_WAIT_S: past that it gets what there is).
_STALE_MARGIN_S = 0.25
_READ_WAIT_S = 5.0
# Windows of the live figures a page may ask for: a chart of the last hour, of a shift, of
# the whole day the ring holds.
FIGURE_WINDOWS_H = (1.0, 6.0, 24.0)
# Finished jobs are pruned from the database about once an hour.
_PRUNE_EVERY_S = 3600.0
# Credentials, figures and regions of workers no longer registered (lost) are looked for
# this often (reclaim.py).
_SWEEP_CREDENTIALS_S = 1.0


class Upkeep:
    """The tick's periodic jobs (see the module docstring). `unhost(region)` stops a
    reclaimed region's actor; `scaling`: the autoscaled regions, never reclaimed."""

    def __init__(self, svc: Any, out: RegionCarrier, creds: Any, reclaim: RegionReclaim,
                 scaling: Mapping[str, Any], unhost: Callable[[str], None], now: float,
                 call_in_loop: Callable[..., None] = lambda fn, *args: fn(*args)):
        self._svc, self._out, self._creds, self._reclaim = svc, out, creds, reclaim
        self._scaling, self._unhost, self._call_in_loop = scaling, unhost, call_in_loop
        self._creds_swept = self._last_prune = now
        self.snapshot: dict = {}  # replaced whole, never mutated; read from the loop
        self._snapshot_at = self._regions_at = float("-inf")
        self._read_at = float("-inf")  # written by readers on the loop, read on the tick
        self._fresh: list[asyncio.Future] = []  # readers waiting for a build (loop only)
        self.figure_series: dict = {}  # hours -> live_figures.series, replaced whole
        self._figures_at = float("-inf")

    def _every(self) -> float:
        return _SNAPSHOT_EVERY_S * max(1.0, len(self._svc.workers.workers) / _SNAPSHOT_WORKERS)

    async def read(self, now: float) -> dict:
        """The snapshot, on the node's loop: a recent one at once, else the next tick's."""
        self._read_at = now
        if now - self._snapshot_at > self._every() + _STALE_MARGIN_S:
            fresh = asyncio.get_running_loop().create_future()
            self._fresh.append(fresh)  # woken by `_built`, queued to the loop after a build
            try:
                await asyncio.wait_for(asyncio.shield(fresh), _READ_WAIT_S)
            except TimeoutError:
                pass
            finally:
                if fresh in self._fresh:
                    self._fresh.remove(fresh)
        return self.snapshot

    def _built(self) -> None:
        fresh, self._fresh = self._fresh, []
        for waiter in fresh:
            if not waiter.done():
                waiter.set_result(None)

    async def figures(self, hours: float, now: float) -> dict:
        """The live figures of the last snapshot and the series of the last `hours`."""
        if hours not in FIGURE_WINDOWS_H:
            raise InvalidRequestError(f"hours: expected one of 1, 6 or 24, got {hours!r}",
                                      "hours")
        await self.read(now)
        return {**self.snapshot.get("figures", {}), "series": self.figure_series.get(
            hours, {"now": None, "hours": hours, "pools": [], "fragmented_chips": []})}

    def tick(self, now: float, reports: dict) -> None:
        """`reports`: the actor's own figures of report batches, for the snapshot."""
        svc = self._svc
        every = self._every()
        if now - self._regions_at >= every:  # decisions use them: kept whether read or not
            self._regions_at = now
            svc.set_region_reports(dict(self._out.region_stats))
            self._out.ask_region_stats()
        if now - self._snapshot_at >= every and now - self._read_at < _READERS_S:
            self._snapshot_at = now
            self._snap(reports)
            self._call_in_loop(self._built)
        if now - svc.usage.flushed_at >= FLUSH_EVERY_S:  # usage series to disk
            svc.usage.flushed_at = now
            try:
                svc.store.put_usage(svc.usage.flush(svc.state))
            except IrisError as exc:  # observation only: the job store halts elsewhere
                _log.error("usage series not stored: %s", exc)
        if now - self._creds_swept >= _SWEEP_CREDENTIALS_S:  # lost workers' credentials end
            self._creds_swept = now
            self._creds.sweep(svc.workers.workers, now)
            svc.drop_absent_stats()
            self._reclaim_regions(now)
        if now - self._last_prune > _PRUNE_EVERY_S:
            self._last_prune = now
            svc.prune()
            svc.bundles.reclaim({j.spec.bundle for j in svc.state.jobs.values()
                                 if j.state not in TERMINAL_JOB})  # bundle_store.py

    def _snap(self, reports: dict) -> None:
        svc, out = self._svc, self._out
        self.snapshot = {**svc.snapshot(),
                         "gang_reservations": sum_stats(out.region_stats.values()),
                         "reports": reports}
        if svc.figures.last_sample != self._figures_at:  # a new point: every 10 s
            self._figures_at = svc.figures.last_sample
            self.figure_series = {h: series(svc.figures, self.snapshot["at"], h)
                                  for h in FIGURE_WINDOWS_H}

    def _reclaim_regions(self, now: float) -> None:
        """Stop and forget the Region actors no host has named for a while (their threads
        end): reclaim.py."""
        hosts = {r: inv.hosts for r, inv in self._svc.pushes.inventory.regions.items()}
        for region in self._reclaim.due(self._out.regions, hosts, self._scaling, now):
            _log.info("region %s: no host for %.0f s; its actor is stopped", region,
                      self._reclaim.idle_s)
            self._svc.forget_region(region)
            self._out.forget_region(region)
            self._unhost(region)


def sum_stats(per_region: Any) -> dict:
    """Reservation outcomes over every region (iris_gang_reservations_total)."""
    total = dict.fromkeys(("reserved", "committed", "aborted", "expired", "released"), 0)
    for stats in list(per_region):
        for key in total:
            total[key] += int(stats.get(key, 0))
    return total
