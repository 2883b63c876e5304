"""Per-peer state reclaimed, not only capped (docs/architecture.md, Per-peer state).

Regions: a Region actor no host has named for a while is stopped and forgotten. Not the
stopping itself (the controller actor's tick: `upkeep.Upkeep`). Any worker may
name a new region at registration (attributes.region), and each region becomes an actor with
a thread of its own, bounded by `max_regions`. A region that is not autoscaled (its slices
come only from registered hosts) and has had no registered host for IDLE_S holds nothing:
no slice, no host, and no gang hold (a hold lasts the coordinator's lease, 10 s, far less).
It is then stopped and forgotten everywhere the controller keeps it (the actor and its
thread, the carrier's entry, the inventory pushes, the stats, the region count of
`max_regions`); a host naming it later makes it anew, as on first sight.

Pure: `now` is passed in.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping

from iris.wire.fencing import SILENT_LOST_S

# Emptiness must outlast a lost host's silence (SILENT_LOST_S: its hosts are declared lost
# only then) and a gang hold's lease (10 s): a region whose hosts blip keeps its actor.
IDLE_S = 2 * SILENT_LOST_S  # (the controller uses 2 x its worker_dead_after_s)


class RegionReclaim:
    """When each region was first seen without a host; which are due to be reclaimed."""

    def __init__(self, idle_s: float = IDLE_S):
        self.idle_s = idle_s
        self._empty_since: dict[str, float] = {}

    def due(self, served: Iterable[str], hosts: Mapping[str, int], keep: Iterable[str],
            now: float) -> list[str]:
        """Of the regions `served`, those without a host (`hosts`: region -> registered
        hosts) for idle_s and not in `keep` (autoscaled ones); they are forgotten here."""
        keep, due = set(keep), []
        served = set(served)
        for region in served:
            if hosts.get(region, 0) or region in keep:
                self._empty_since.pop(region, None)
                continue
            since = self._empty_since.setdefault(region, now)
            if now - since >= self.idle_s:
                due.append(region)
        for region in [r for r in self._empty_since if r not in served or r in due]:
            del self._empty_since[region]
        return sorted(due)


def drop_absent(per_worker: dict, registered: Container) -> int:
    """Forget the entries of workers no longer registered (lost, gone, revoked): a table
    kept per worker id (its last figures) is then bounded by the fleet, not by every id
    ever seen. How many were dropped."""
    gone = [w for w in per_worker if w not in registered]
    for worker_id in gone:
        del per_worker[worker_id]
    return len(gone)
