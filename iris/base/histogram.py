"""A fixed-bucket histogram of durations, cheap enough for a hot path. Not thread-safe.

Each owner records from one thread (an actor's thread, the node's loop) and publishes
`as_dict()`, a plain copy in the shape /metrics renders: cumulative counts per upper
bound `le` (seconds), the total count and the sum of the samples.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

# 50 µs .. 10 s: actor calls sit at the low end, scheduling passes and slow calls at the top.
DEFAULT_BOUNDS_S: tuple[float, ...] = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    __slots__ = ("bounds", "_counts", "count", "sum_s")

    def __init__(self, bounds: Sequence[float] = DEFAULT_BOUNDS_S):
        if list(bounds) != sorted(bounds) or not bounds:
            raise ValueError(f"histogram bounds must be ascending and non-empty, got {bounds}")
        self.bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # last slot: above every bound
        self.count = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum_s += seconds

    def as_dict(self) -> dict:
        """{"buckets": {le: cumulative count}, "count": n, "sum_s": total seconds}."""
        buckets, running = {}, 0
        for bound, n in zip(self.bounds, self._counts, strict=False):
            running += n
            buckets[bound] = running
        return {"buckets": buckets, "count": self.count, "sum_s": self.sum_s}

    def quantile(self, q: float) -> float | None:
        """Upper bound of the bucket holding the q-th sample (None when empty or beyond)."""
        if not self.count:
            return None
        rank, running = q * self.count, 0
        for bound, n in zip(self.bounds, self._counts, strict=False):
            running += n
            if running >= rank:
                return bound
        return None


def merge_histograms(a: dict, b: dict) -> dict:
    """Two `as_dict()` results with the same bounds as one."""
    return {"buckets": {le: n + b["buckets"].get(le, 0) for le, n in a["buckets"].items()},
            "count": a["count"] + b["count"], "sum_s": a["sum_s"] + b["sum_s"]}
