"""Ships one task attempt's stdout/stderr to a sink as numbered chunks. Not the pipe reader.

The worker's pipe-reading thread calls `write()`, which only appends to a bounded buffer
under a lock held for microseconds: it never waits on storage, so the task's writes to its
pipe never stall on a slow or failing bucket. A background thread cuts a chunk when the
oldest unshipped byte is `flush_interval_s` old or `flush_bytes` are pending, uploads it
create-only, and retries with capped exponential backoff on storage errors. If storage
falls behind for long, the buffer drops its oldest output and leaves a marker line
(iris.logstore.buffer). A chunk, once uploaded, survives anything that happens to the
worker. `close()` ships the rest and composes the chunks into one `log` object.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError
from iris.logstore.buffer import LogBuffer
from iris.logstore.errors import ChunkExistsError
from iris.logstore.model import (
    STREAMS,
    ChunkHeader,
    Record,
    check_job,
    chunk_key,
    encode_chunk,
    log_key,
)
from iris.logstore.sinks import LogSink

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShipperConfig:
    """Tuning of one shipper. Bytes are bytes, durations seconds.

    flush_interval_s: the oldest unshipped line waits at most this long before its chunk
        is cut. 0.5 s, not 1 s: the design promises that a lost machine loses at most the
        last second, and that second must also cover the upload (tens of ms on GCS, more
        on a loaded host). It costs two GCS writes per second per task that is printing
        (~$0.036/hour at $0.005 per 1000 writes, small beside an accelerator host); an idle
        task writes nothing.
    flush_bytes: cut a chunk once this much is pending, and never make one bigger. 4 MiB
        keeps a task logging 20 MB/s at ~5 writes/s, each a single-request upload (the
        client switches to slower multi-request resumable uploads above 8 MiB) that takes
        well under the flush interval.
    max_buffer_bytes: unshipped output kept before the oldest is dropped. 32 MiB rides out
        ~1.5 s of outage at 20 MB/s and hours at the KB/s most tasks print; 8 tasks on a
        host cost at most 256 MiB (plus one chunk in flight each).
    retry_initial_s, retry_max_s: backoff between upload attempts; 0.2 s doubling to 5 s
        retries a blip quickly without hammering a bucket that is down.
    """

    flush_interval_s: float = 0.5
    flush_bytes: int = 4 * 1024 * 1024
    max_buffer_bytes: int = 32 * 1024 * 1024
    retry_initial_s: float = 0.2
    retry_max_s: float = 5.0

    def __post_init__(self) -> None:
        if not (self.flush_interval_s > 0 and self.retry_initial_s > 0
                and self.retry_max_s >= self.retry_initial_s):
            raise InvalidRequestError("shipper durations must be > 0 and retry_max_s >= "
                                      "retry_initial_s", field="flush_interval_s")
        if not 0 < self.flush_bytes <= self.max_buffer_bytes:
            raise InvalidRequestError("need 0 < flush_bytes <= max_buffer_bytes",
                                      field="flush_bytes")


@dataclass(frozen=True)
class ShipperStats:
    """Counters for metrics. `flush_lag_s` is the age of the oldest byte of the last chunk
    when it was stored; `pending_age_s` the age, now, of the oldest byte not yet stored
    (buffered or in an upload still retrying; 0 when all is stored), which keeps growing
    while storage is down; `fenced` means another writer owns this attempt (we stopped)."""

    lines: int
    bytes: int
    dropped_lines: int
    dropped_bytes: int
    chunks: int
    retries: int
    flush_lag_s: float
    max_flush_lag_s: float
    pending_bytes: int
    fenced: bool
    composed: bool
    pending_age_s: float = 0.0


class LogShipper:
    def __init__(self, sink: LogSink, job: str, task: int, attempt: int,
                 clock: Clock = SYSTEM_CLOCK, config: ShipperConfig | None = None):
        self._sink = sink
        self._job = check_job(job)
        self._task, self._attempt = task, attempt
        chunk_key(self._job, task, attempt, 0)  # validates task and attempt
        self._clock = clock
        self._cfg = config or ShipperConfig()
        self._buf = LogBuffer(self._cfg.max_buffer_bytes)
        self._cond = threading.Condition()
        self._closing = False
        self._abandon = threading.Event()
        self._written: list[str] = []
        self._chunks = self._retries = 0
        self._lag = self._max_lag = 0.0
        self._uploading_since: float | None = None  # oldest byte of the chunk in flight
        self._late_lines = self._late_bytes = 0
        self._fenced = self._composed = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"log-shipper{self._job}/{task}/{attempt}")
        self._thread.start()

    def write(self, stream: str, data: bytes | str, ts: float | None = None) -> None:
        """Queue output the task wrote to `stream` ("stdout"/"stderr"). Never blocks."""
        if stream not in STREAMS:
            raise InvalidRequestError(f"stream must be one of {STREAMS}, got {stream!r}",
                                      field="stream")
        if isinstance(data, str):
            data = data.encode("utf-8", errors="replace")
        ts = self._clock.wall() if ts is None else ts
        now = self._clock.monotonic()
        with self._cond:
            if self._closing or self._fenced:
                self._late_lines += data.count(b"\n")
                self._late_bytes += len(data)
                return
            was_idle = self._buf.next_due(0.0) is None
            self._buf.append(stream, data, ts, now)
            # The flusher sleeps without a deadline while nothing pends: wake it to start one.
            if was_idle or self._buf.due(now, self._cfg.flush_interval_s, self._cfg.flush_bytes):
                self._cond.notify()

    def stats(self) -> ShipperStats:
        with self._cond:
            b = self._buf.stats()
            oldest = [t for t in (self._uploading_since, self._buf.next_due(0.0))
                      if t is not None]
            age = self._clock.monotonic() - min(oldest) if oldest else 0.0
            return ShipperStats(
                lines=b.lines, bytes=b.bytes, dropped_lines=b.dropped_lines + self._late_lines,
                dropped_bytes=b.dropped_bytes + self._late_bytes, chunks=self._chunks,
                retries=self._retries, flush_lag_s=self._lag, max_flush_lag_s=self._max_lag,
                pending_bytes=b.pending_bytes, fenced=self._fenced, composed=self._composed,
                pending_age_s=max(0.0, age))

    def close(self, timeout_s: float = 30.0) -> ShipperStats:
        """Ship what is left, then compose the chunks into the attempt's `log` object.

        Waits up to `timeout_s` for storage; after that, unshipped output is abandoned (and
        counted as dropped) but every chunk already stored stays readable.
        """
        with self._cond:
            if self._closing:
                closed_before = True
            else:
                closed_before, self._closing = False, True
                self._cond.notify()
        if closed_before:  # a second close must not compose chunks the first one deleted
            self._thread.join()
            return self.stats()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            _log.warning("log shipper for %s task %d attempt %d: storage did not accept the "
                         "last chunk within %.0f s; abandoning it",
                         self._job, self._task, self._attempt, timeout_s)
            self._abandon.set()
            self._thread.join()
        if self._written and not self._fenced:
            self._compose()
        return self.stats()

    def _compose(self) -> None:
        dest = log_key(self._job, self._task, self._attempt)
        try:
            self._sink.compose(dest, self._written)
        except Exception as exc:  # the chunks stay readable; only the tidy-up is lost
            _log.warning("could not compose %s (chunks kept): %s", dest, exc)
            return
        self._composed = True
        try:
            self._sink.delete(self._written)
        except Exception as exc:
            _log.warning("could not delete chunks of %s: %s", dest, exc)

    def _run(self) -> None:
        cfg = self._cfg
        while True:
            with self._cond:
                while not self._closing and not self._buf.due(
                        self._clock.monotonic(), cfg.flush_interval_s, cfg.flush_bytes):
                    due_at = self._buf.next_due(cfg.flush_interval_s)
                    # Waits in real time; with a FakeClock, chunks are cut by size or close.
                    timeout = None if due_at is None else max(0.0, due_at -
                                                               self._clock.monotonic())
                    self._cond.wait(timeout)
                final = self._closing
                since = self._buf.next_due(0.0)
                records = self._buf.take(self._clock.monotonic(), cfg.flush_interval_s, final,
                                         max_bytes=cfg.flush_bytes)
                rest = self._buf.pending_bytes
                self._uploading_since = since if records else None
            if records:
                self._ship(records, since)
            if self._fenced or (final and not rest):
                return

    def _ship(self, records: list[Record], since: float | None) -> None:
        seq = len(self._written)
        key = chunk_key(self._job, self._task, self._attempt, seq)
        data = encode_chunk(ChunkHeader(self._job, self._task, self._attempt, seq), records)
        delay = self._cfg.retry_initial_s
        while not self._abandon.is_set():  # once close() gave up, the rest is not tried
            try:
                self._sink.put_chunk(key, data)
                break
            except ChunkExistsError:
                _log.error("log chunk %s exists with other content: another writer owns "
                           "this attempt; this shipper stops", key)
                with self._cond:
                    self._fenced = True
                self._count_lost(records, data)
                return
            except Exception as exc:  # storage, network or client bug: keep the task going
                with self._cond:
                    self._retries += 1
                _log.warning("log chunk %s upload failed (retry in %.1f s): %s", key, delay, exc)
            self._abandon.wait(delay)
            delay = min(delay * 2, self._cfg.retry_max_s)
        else:
            self._count_lost(records, data)
            return
        lag = self._clock.monotonic() - since if since is not None else 0.0
        with self._cond:
            self._uploading_since = None
            self._written.append(key)
            self._chunks += 1
            self._lag, self._max_lag = lag, max(self._max_lag, lag)

    def _count_lost(self, records: list[Record], data: bytes) -> None:
        with self._cond:
            self._uploading_since = None
            self._late_lines += sum(r.data.count(b"\n") for r in records)
            self._late_bytes += len(data)
