"""Where each waiting job stands: its place in line for its band and accelerator, and who is ahead.

Pure: waiting jobs and what each user runs now in, positions out. Not the pass
(scheduler.py), though it follows the pass's own order, so the line it shows is the order
in which room, as it frees, goes to jobs: bands in turn (production, interactive, batch);
within a band, fair share between users (the user with the smallest dominant share of
cpu, memory or chips goes next, charged for each job it is served), each user's jobs oldest
first. Jobs compete only with jobs that want the same accelerator (or CPU-only hosts).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iris.controller.scheduling.model import Band, Demand


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job with tasks pending: `demand` is all of them together; `label` how it is shown
    ("64 chips", "4 cpu")."""

    job_id: str
    user: str
    band: Band
    accelerator: str          # "v5litepod-16", "H100" or "cpu"
    demand: Demand
    submitted_at: float
    label: str


@dataclass(frozen=True, slots=True)
class Spot:
    position: int                       # 1 = next in line
    band: Band
    accelerator: str
    ahead: tuple[Waiting, ...]          # in line order: the next to be served first


def positions(waiting: Sequence[Waiting], usage: Mapping[tuple[Band, str], Demand],
              total: Demand) -> dict[str, Spot]:
    """Each waiting job's spot. `usage`: (band, user) -> what that user runs in that band
    now; `total`: the fleet's capacity (the denominator of a share)."""
    lines: dict[tuple[Band, str], list[Waiting]] = {}
    for band in sorted({w.band for w in waiting}):
        for w in _band_order([w for w in waiting if w.band == band], band, usage, total):
            lines.setdefault((band, w.accelerator), []).append(w)
    out = {}
    for (band, accel), line in lines.items():
        for i, w in enumerate(line):
            out[w.job_id] = Spot(i + 1, band, accel, tuple(line[:i]))
    return out


def _band_order(jobs: list[Waiting], band: Band, usage: Mapping[tuple[Band, str], Demand],
                total: Demand) -> list[Waiting]:
    queues: dict[str, list[Waiting]] = {}
    for w in sorted(jobs, key=lambda w: (w.submitted_at, w.job_id), reverse=True):
        queues.setdefault(w.user, []).append(w)   # oldest last: pop() serves it
    used = {u: usage.get((band, u), Demand()) for u in queues}
    heap = [(_share(used[u], total), u) for u in sorted(queues)]
    heapq.heapify(heap)
    order = []
    while heap:
        _, user = heapq.heappop(heap)
        job = queues[user].pop()
        order.append(job)
        used[user] = used[user] + job.demand
        if queues[user]:
            heapq.heappush(heap, (_share(used[user], total), user))
    return order


def _share(d: Demand, t: Demand) -> float:
    return max(d.cpu / t.cpu if t.cpu else 0.0, d.memory / t.memory if t.memory else 0.0,
               d.chips / t.chips if t.chips else 0.0)
