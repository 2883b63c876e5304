"""The log shipping lag /metrics publishes (iris_log_shipping_lag_seconds), at its source: a
shipper whose storage stalls reports output getting older, and the figure falls back once the
chunk is stored. (Workers send max(flush_lag_s, pending_age_s) over their live shippers.)"""

from __future__ import annotations

import threading

from iris.base.clock import FakeClock
from iris.logstore.shipper import LogShipper, ShipperConfig
from iris.logstore.sinks import LocalDirSink

WAIT_S = 30.0


class _StalledSink(LocalDirSink):
    """A real directory sink whose uploads wait until the test lets them through."""

    def __init__(self, root):
        super().__init__(root)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def put_chunk(self, key: str, data: bytes) -> None:
        self.entered.set()
        if not self.gate.wait(WAIT_S):
            raise TimeoutError("the test never let the upload through")
        super().put_chunk(key, data)


def test_shipping_lag_grows_while_storage_stalls_and_settles_once_stored(tmp_path):
    clock = FakeClock()
    sink = _StalledSink(tmp_path)
    # 16-byte chunks: with a fake clock, chunks are cut by size, never by age.
    shipper = LogShipper(sink, "/alice/train", 0, 0, clock=clock,
                         config=ShipperConfig(flush_bytes=16, max_buffer_bytes=1024))
    try:
        assert shipper.stats().pending_age_s == 0.0  # nothing printed: no lag, not unknown
        shipper.write("stdout", "a line long enough to cut a chunk\n")
        assert sink.entered.wait(WAIT_S), "the shipper never tried to upload"
        clock.advance(7.0)  # storage hangs for 7 s
        stalled = shipper.stats()
        assert stalled.pending_age_s == 7.0 and stalled.chunks == 0
        sink.gate.set()
        stats = shipper.close()
        assert stats.chunks >= 1 and stats.dropped_lines == 0
        assert stats.pending_age_s == 0.0  # everything stored
        assert stats.flush_lag_s == 7.0  # the last chunk reached storage 7 s after printing
    finally:
        sink.gate.set()
        shipper.close()
