"""The bounded buffer of one attempt's unshipped output: pure, no threads, no clock, no I/O.

Policy under pressure: when pending bytes exceed `max_bytes`, the OLDEST records are
dropped and a visible marker line takes their place, so the task never waits on storage and
the reader sees exactly where output is missing. The newest output is kept because it is
what a post-mortem needs (the error at the end, not the warm-up at the start).

Lines are kept whole: a pipe read that ends mid-line keeps the tail until its newline
arrives, unless it grows past `max_line_bytes` or waits a whole flush interval (a progress
bar without newlines), then it is shipped as it is.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from iris.logstore.model import Record


@dataclass(frozen=True)
class BufferStats:
    lines: int
    bytes: int
    dropped_lines: int
    dropped_bytes: int
    pending_bytes: int


def drop_marker(lines: int, nbytes: int) -> bytes:
    return (f"[iris: dropped {lines} lines ({nbytes} bytes) — log shipping fell behind]\n"
            ).encode()


@dataclass
class _Partial:
    ts: float
    since: float
    data: bytes


class LogBuffer:
    """Records waiting for the next chunk. `now` arguments are monotonic seconds."""

    def __init__(self, max_bytes: int, max_line_bytes: int = 64 * 1024):
        if max_bytes <= 0 or max_line_bytes <= 0:
            raise ValueError("buffer limits must be positive byte counts")
        self._max_bytes = max_bytes
        self._max_line = max_line_bytes
        self._records: deque[Record] = deque()
        self._record_bytes = 0
        self._partial: dict[str, _Partial] = {}
        self._since: float | None = None
        self._drop_lines = self._drop_bytes = 0
        self._drop_ts = 0.0
        self._lines = self._bytes_in = self._dropped_lines = self._dropped_bytes = 0

    @property
    def pending_bytes(self) -> int:
        return self._record_bytes + sum(len(p.data) for p in self._partial.values())

    def stats(self) -> BufferStats:
        return BufferStats(self._lines, self._bytes_in, self._dropped_lines,
                           self._dropped_bytes, self.pending_bytes)

    def append(self, stream: str, data: bytes, ts: float, now: float) -> None:
        """Add one pipe read of `stream` made at wall time `ts`."""
        if not data:
            return
        self._bytes_in += len(data)
        if self._since is None:
            self._since = now
        old = self._partial.pop(stream, None)
        start_ts = ts
        if old is not None:
            data, start_ts = old.data + data, old.ts
        cut = data.rfind(b"\n") + 1
        if len(data) - cut >= self._max_line:
            cut = len(data)
        if cut:
            self._push(Record(start_ts, stream, data[:cut]))
        if cut < len(data):
            since = old.since if old is not None and not cut else now
            self._partial[stream] = _Partial(ts if cut else start_ts, since, data[cut:])
        self._enforce_limit()

    def _push(self, rec: Record) -> None:
        self._records.append(rec)
        self._record_bytes += len(rec.data)
        self._lines += rec.data.count(b"\n") + (0 if rec.data.endswith(b"\n") else 1)

    def _enforce_limit(self) -> None:
        while self._records and self.pending_bytes > self._max_bytes:
            rec = self._records.popleft()
            self._record_bytes -= len(rec.data)
            lines = rec.data.count(b"\n") + (0 if rec.data.endswith(b"\n") else 1)
            if not self._drop_lines:
                self._drop_ts = rec.ts
            self._drop_lines += lines
            self._drop_bytes += len(rec.data)
            self._dropped_lines += lines
            self._dropped_bytes += len(rec.data)

    def due(self, now: float, interval_s: float, flush_bytes: int) -> bool:
        """Whether a chunk should be cut now: enough bytes, or the oldest byte is old enough."""
        if self.pending_bytes >= flush_bytes or self._drop_lines:
            return True
        return self._since is not None and now - self._since >= interval_s

    def next_due(self, interval_s: float) -> float | None:
        """Monotonic time the oldest pending byte becomes due, or None if nothing pends."""
        return None if self._since is None else self._since + interval_s

    def take(self, now: float, interval_s: float, final: bool = False,
             max_bytes: int | None = None) -> list[Record]:
        """The next chunk's records: a drop marker first, then records oldest first, up to
        `max_bytes` (at least one record).

        Partial lines go too, once every complete record is taken, if `final` or if they
        waited `interval_s`; others stay.
        """
        out: list[Record] = []
        if self._drop_lines:
            out.append(Record(self._drop_ts, "stderr",
                              drop_marker(self._drop_lines, self._drop_bytes)))
            self._drop_lines = self._drop_bytes = 0
        size = 0
        while self._records and (max_bytes is None or not size
                                 or size + len(self._records[0].data) <= max_bytes):
            rec = self._records.popleft()
            size += len(rec.data)
            self._record_bytes -= len(rec.data)
            out.append(rec)
        if self._records:
            return out  # the rest is already due: `_since` stays as old as it was
        for stream, part in list(self._partial.items()):
            if final or now - part.since >= interval_s:
                del self._partial[stream]
                out.append(Record(part.ts, stream, part.data))
                self._lines += 1
        self._since = min((p.since for p in self._partial.values()), default=None)
        return out
