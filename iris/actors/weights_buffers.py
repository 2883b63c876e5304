"""A Publisher's writable buffers: the next version filled in place in shared memory.

Not the push (weights.py, relay.py) nor the segments' reader tracking (shm_owned.py). The
Publisher hands out {name: writable array} over an OwnedSegment; publish() of those very
arrays then sends them as they are: to subscribers on this host a version flip (a table
naming the segment), no copy. The segments rotate:

- the one holding the published version is never handed out (late joiners fetch it);
- one is handed out again only once quiet (no subscriber holds a view of the version in
  it: a reader of version N never sees bytes of N+1) and its push is settled;
- otherwise a new one is made (a slow reader costs memory, never a torn version).

A version is published only by publish(): arrays filled halfway by a trainer that then
raised, or died, are never sent (the next buffers() hands them out again).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from iris.actors.shm_map import _PAGE
from iris.actors.shm_owned import OwnedSegment, layout_size

# Quiet segments of another size kept for a layout that changes back (beyond: closed).
_KEEP_IDLE = 2


def parse_layout(layout: Any) -> dict:
    """{name: (shape tuple, numpy dtype)} from {name: array} or {name: (shape, dtype)}."""
    if not isinstance(layout, dict) or not layout:
        raise ValueError(f"layout must be a non-empty dict of name -> array or (shape, "
                         f"dtype), got {type(layout).__name__}")
    out = {}
    for name, spec in layout.items():
        if not isinstance(name, str):
            raise ValueError(f"layout names must be str, got {name!r}")
        try:
            if isinstance(spec, np.ndarray):
                shape, dtype = spec.shape, spec.dtype
            else:
                shape, dtype = spec
                shape = (shape,) if isinstance(shape, int) else tuple(shape)
            dtype = np.dtype(dtype)
            if dtype.hasobject or any(not isinstance(d, int) or d < 0 for d in shape):
                raise ValueError
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ValueError(f"layout[{name!r}] must be an array or (shape, dtype) of "
                             f"plain numbers, got {spec!r}") from None
        out[name] = (shape, dtype)
    return out


def _fits(segment: OwnedSegment, size: int) -> bool:
    return size <= segment.capacity <= 2 * size + _PAGE


class Buffers:
    """The OwnedSegments of one Publisher and which one is being filled."""

    def __init__(self, pool: Any, now: Any) -> None:
        self._pool, self._now = pool, now
        self._lock = threading.Lock()
        self._segments: list[OwnedSegment] = []
        self._published: OwnedSegment | None = None  # holds the newest published version
        self._filling: tuple[OwnedSegment, dict] | None = None
        self.layout: dict | None = None

    def hand_out(self, layout: dict | None, version: int, settled: int) -> dict:
        """Writable arrays for `version`, in a segment no reader holds. `settled`: every
        push up to this version is over (a segment of a later one may still be read)."""
        with self._lock:
            layout = self.layout = layout or self.layout
            if layout is None:
                raise ValueError("buffers(): give a layout the first time ({name: array} or "
                                 "{name: (shape, dtype)})")
            size, segment = layout_size(layout), None
            if self._filling is not None:  # not published: hand the same one out again
                segment, self._filling = self._filling[0], None
                if not _fits(segment, size):
                    segment.version = 0  # never sent: free for any later version
                    self._segments.append(segment)
                    segment = None
            segment = segment or self._take(size, settled)
            segment.rewrite(version)
            arrays = segment.arrays(layout)
            self._filling = (segment, arrays)
            return arrays

    def adopt(self, weights: Any, version: int) -> bool:
        """publish(weights) is about to send `version`: are they the arrays handed out? If
        so, their segment now holds the published version (read-only from here on)."""
        with self._lock:
            if self._filling is None or weights is not self._filling[1]:
                return False
            segment, arrays = self._filling
            self._filling = None
            if self._published is not None:
                self._segments.append(self._published)
            self._published = segment
            segment.version = version
        for array in arrays.values():
            array.flags.writeable = False
        return True

    def _take(self, size: int, settled: int) -> OwnedSegment:
        now = self._now()
        fits = [s for s in self._segments
                if _fits(s, size) and s.version <= settled and s.quiet(now)]
        if fits:
            best = min(fits, key=lambda s: s.capacity)
            self._segments.remove(best)
            self._close_idle(size, settled, now)
            return best
        segment = OwnedSegment(size)
        self._pool.own(segment)
        self._close_idle(size, settled, now)
        return segment

    def _close_idle(self, size: int, settled: int, now: float) -> None:
        idle = [s for s in self._segments if s.version <= settled and s.quiet(now)]
        for segment in idle[_KEEP_IDLE:]:
            self._segments.remove(segment)
            self._pool.disown(segment)
            segment.close()

    def close(self) -> None:
        with self._lock:
            every = [*self._segments, *([self._published] if self._published else []),
                     *([self._filling[0]] if self._filling else [])]
            self._segments, self._published, self._filling = [], None, None
        for segment in every:
            self._pool.disown(segment)
            segment.close()
