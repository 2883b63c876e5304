"""What attempts use, as the controller keeps it: a compact series per running attempt, the
totals of ended ones, and the ports their workers gave their named ports. A component of the
controller's service with its own state and a small interface; not the summary (usage_view).

    observe(worker_id, updates, samples, state)  a report's usage (on the controller's turn)
    take_rows()      rows for the turn's transaction (store.apply's `usage`)
    flush(state, now) every FLUSH_EVERY_S from the tick: series of running attempts to disk
    ports_of(attempt_id), stored(job_id, state)   for `iris job url` and `iris job summary`

Bounds (DESIGN: everything kept per peer has a bound and a reclaim rule): a series holds at
most MAX_POINTS points; when full, neighbouring points merge (the run keeps its whole span
at half the resolution, peaks kept); only attempts that still run are in memory (an ended
one is written with its totals and dropped; one that ended without saying so is dropped at
the next flush), and at most MAX_LIVE of them. On disk, rows go with their job.

Reports are fenced like attempt updates: a worker's readings of an attempt that is not its
own are ignored.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import msgpack

from iris.controller.jobs.model import ACTIVE_ATTEMPT
from iris.controller.jobs.state import KernelState
from iris.controller.jobs.usage_rows import Row, Stored
from iris.wire import control, schema

_log = logging.getLogger(__name__)
# Points kept per attempt: 240 draws a small chart finely (one per 2 s for 8 minutes, then
# merged: a day-long run at one per ~6 min). ~50 bytes each in memory.
MAX_POINTS = 240
# Running attempts tracked at once: far above what a fleet runs on one controller here;
# past it the oldest series is dropped (its totals still arrive with its end).
MAX_LIVE = 100_000
# Series of running attempts are written this often, so a controller restart keeps them.
FLUSH_EVERY_S = 60.0

Point = tuple  # (at, cpu_s, rss_bytes, memory_bytes|None, disk_bytes|None, accel|None)


@dataclass
class Series:
    """One attempt's readings, at most MAX_POINTS points of `stride` readings each: when
    full, neighbours merge and the stride doubles, so the whole run stays drawn at one
    resolution (a day-long run ends at one point per ~6 min of readings every 2 s)."""

    job_id: str
    points: list[Point] = field(default_factory=list)
    stride: int = 1  # readings per point
    in_last: int = 0  # readings merged into the last point so far
    dirty: bool = False

    def add(self, sample: control.UsageSample) -> None:
        if self.points and sample.at <= self.points[-1][0]:
            return  # a reading sent twice (a report retried) or out of order
        point = (round(sample.at, 3), round(sample.cpu_s, 3), sample.rss_bytes,
                 sample.memory_bytes, sample.disk_bytes, sample.accel_busy)
        self.dirty = True
        if self.points and self.in_last < self.stride:
            self.points[-1] = merge(self.points[-1], point)
            self.in_last += 1
            return
        self.points.append(point)
        self.in_last = 1
        if len(self.points) >= MAX_POINTS:  # even: every point merges with a neighbour
            self.points = halve(self.points)
            self.in_last = self.stride + 1  # a whole point and the reading just added
            self.stride *= 2


def merge(a: Point, b: Point) -> Point:
    """Two neighbouring points as one: the later time and CPU counter (it only grows), the
    larger memory (a peak must not vanish from the chart), the last disk size, the mean busy."""
    accel = [x for x in (a[5], b[5]) if x is not None]
    return (b[0], b[1], max(a[2], b[2]), _max(a[3], b[3]), b[4] if b[4] is not None else a[4],
            sum(accel) / len(accel) if accel else None)


def halve(points: list[Point]) -> list[Point]:
    out = [merge(a, b) for a, b in zip(points[0::2], points[1::2], strict=False)]
    if len(points) % 2:
        out.append(points[-1])
    return out


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def pack(points: list[Point]) -> bytes:
    return msgpack.packb([list(p) for p in points], use_bin_type=True)


def unpack(blob: bytes | None) -> list[Point]:
    return [tuple(p) for p in msgpack.unpackb(blob, raw=False)] if blob else []


class UsageBook:
    """The controller's usage component (see the module docstring). Touched only on the
    controller's turn."""

    def __init__(self, stored_series: Callable[[str], bytes | None] = lambda _: None):
        # A series written before a controller restart, continued when readings come again.
        self._stored_series = stored_series
        self.live: OrderedDict[str, Series] = OrderedDict()  # attempt id -> its series
        self._ports: dict[str, dict[str, int]] = {}  # attempt id -> name -> port (live)
        self._rows: list[Row] = []  # for the turn's transaction
        self.flushed_at = float("-inf")

    def observe(self, worker_id: str, updates: tuple[control.AttemptUpdate, ...],
                samples: tuple[control.UsageSample, ...], state: KernelState) -> None:
        for sample in samples:
            attempt = state.attempts.get(sample.attempt_id)
            if attempt is None or attempt.worker_id != worker_id \
                    or attempt.state not in ACTIVE_ATTEMPT:
                continue
            series = self.live.get(sample.attempt_id)
            if series is None:
                series = self.live[sample.attempt_id] = Series(
                    attempt.job_id, unpack(self._stored_series(sample.attempt_id)))
                if len(self.live) > MAX_LIVE:
                    self.live.popitem(last=False)
            series.add(sample)
        for update in updates:
            attempt = state.attempts.get(update.attempt_id)
            if attempt is None or attempt.worker_id != worker_id:
                continue  # fenced, as the kernel fences the update itself
            if update.ports:
                self._ports[update.attempt_id] = dict(update.ports)
                self._rows.append(Row(update.attempt_id, attempt.job_id, ports=update.ports))
            if update.status in ("exited", "preempted"):
                self._ended(update, attempt.job_id)

    def _ended(self, update: control.AttemptUpdate, job_id: str) -> None:
        series = self.live.pop(update.attempt_id, None)
        self._ports.pop(update.attempt_id, None)
        totals = schema.encode(update.usage) if update.usage is not None else None
        if totals is not None or series is not None:
            self._rows.append(Row(update.attempt_id, job_id, totals=totals,
                                  series=pack(series.points) if series else None))

    def take_rows(self) -> list[Row]:
        rows, self._rows = self._rows, []
        return rows

    def flush(self, state: KernelState) -> list[Row]:
        """Rows for the series that changed since the last flush; attempts that ended
        without saying so (their worker was lost) are written one last time and dropped."""
        rows = self.take_rows()
        for attempt_id in list(self.live):
            series = self.live[attempt_id]
            attempt = state.attempts.get(attempt_id)
            gone = attempt is None or attempt.state not in ACTIVE_ATTEMPT
            if series.dirty:
                rows.append(Row(attempt_id, series.job_id, series=pack(series.points)))
                series.dirty = False
            if gone:
                del self.live[attempt_id]
                self._ports.pop(attempt_id, None)
        return rows

    def ports_of(self, attempt_id: str, stored: Stored | None = None) -> dict[str, int]:
        """A running attempt's named ports (from memory, else what the store kept)."""
        if attempt_id in self._ports:
            return dict(self._ports[attempt_id])
        return dict(stored.ports) if stored is not None and stored.ports else {}

    def points(self, attempt_id: str) -> list[Point]:
        """An attempt's series: live in memory, else as last written."""
        series = self.live.get(attempt_id)
        if series is not None:
            return list(series.points)
        return unpack(self._stored_series(attempt_id))
