"""The shipper: timely chunks, drop-oldest under pressure, retries, zombie fencing, compose."""

from __future__ import annotations

import threading

import pytest

from iris.base.errors import InvalidRequestError
from iris.logstore.gcs import GcsSink
from iris.logstore.model import job_prefix
from iris.logstore.reader import LogFilter, read_logs
from iris.logstore.shipper import LogShipper, ShipperConfig

JOB = "/alice/train"


def _texts(sink, job=JOB, **flt):
    return [ln.text for ln in read_logs(sink, job, LogFilter(**flt))]


def test_shipper_lines_readable_before_close(sink, wait_for):
    shipper = LogShipper(sink, JOB, 0, 0)
    try:
        shipper.write("stdout", "hello\nworld\n")
        shipper.write("stderr", b"oops\n")
        wait_for(lambda: len(_texts(sink)) == 3, what="lines in storage")
        assert sorted(_texts(sink)) == ["hello", "oops", "world"]
        # The object can be visible a moment before put_chunk returns and the count moves.
        wait_for(lambda: shipper.stats().chunks >= 1, what="chunk counted")
    finally:
        shipper.close()


def test_shipper_close_composes_one_log_with_every_line(sink):
    shipper = LogShipper(sink, JOB, 2, 1, config=ShipperConfig(flush_bytes=64))
    for i in range(200):
        shipper.write("stdout", f"line {i:04d} padding padding\n")
    stats = shipper.close()
    assert stats.composed and stats.lines == 200 and stats.dropped_lines == 0
    assert sink.list(job_prefix(JOB)) == [f"{job_prefix(JOB)}2/attempts/1/log"]
    assert _texts(sink) == [f"line {i:04d} padding padding" for i in range(200)]
    assert shipper.close() == stats  # closing again changes nothing
    assert len(_texts(sink)) == 200


class _GatedSink:
    """Wraps a real sink; uploads wait until the test opens the gate (storage that stalls)."""

    def __init__(self, inner):
        self._inner = inner
        self.entered = threading.Event()
        self.gate = threading.Event()

    def put_chunk(self, key, data):
        self.entered.set()
        if not self.gate.wait(60):
            raise TimeoutError("test never opened the gate")
        self._inner.put_chunk(key, data)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_shipper_full_buffer_drops_oldest_with_visible_marker(sink):
    gated = _GatedSink(sink)
    cfg = ShipperConfig(flush_interval_s=3600, flush_bytes=100, max_buffer_bytes=1000)
    shipper = LogShipper(gated, JOB, 0, 0, config=cfg)
    shipper.write("stdout", "first " + "x" * 100 + "\n")
    assert gated.entered.wait(30)  # chunk 0 is in flight, storage is stalled
    for i in range(100):
        shipper.write("stdout", f"line {i:03d} {'y' * 40}\n")  # write() does not block
    gated.gate.set()
    stats = shipper.close()
    texts = _texts(sink)
    assert texts[0].startswith("first ")
    assert texts[1] == (f"[iris: dropped {stats.dropped_lines} lines ({stats.dropped_bytes} "
                        "bytes) — log shipping fell behind]")
    kept = [int(t.split()[1]) for t in texts[2:]]
    assert kept == list(range(100 - len(kept), 100)) and 0 < len(kept) < 100
    assert stats.dropped_lines == 100 - len(kept)


def test_shipper_storage_outage_retries_and_loses_nothing(own_fake_gcs, wait_for):
    bucket = own_fake_gcs.new_bucket()
    sink = GcsSink(bucket, "iris", client=own_fake_gcs.client(),
                   request_timeout_s=2.0, retry_deadline_s=0.5)
    cfg = ShipperConfig(flush_interval_s=0.1, retry_initial_s=0.05, retry_max_s=0.5)
    shipper = LogShipper(sink, JOB, 0, 0, config=cfg)
    try:
        shipper.write("stdout", "before\n")
        wait_for(lambda: _texts(sink) == ["before"], what="first line stored")
        own_fake_gcs.stop()
        shipper.write("stdout", "during 1\n")
        shipper.write("stdout", "during 2\n")
        wait_for(lambda: shipper.stats().retries >= 2, what="failed uploads")
        own_fake_gcs.start()
        shipper.write("stdout", "after\n")
        wait_for(lambda: len(_texts(sink)) == 4, what="lines after recovery")
    finally:
        stats = shipper.close()
    assert _texts(sink) == ["before", "during 1", "during 2", "after"]
    assert stats.dropped_lines == 0 and stats.composed


def test_shipper_close_with_storage_down_gives_up_and_counts_the_loss(own_fake_gcs):
    sink = GcsSink(own_fake_gcs.new_bucket(), "iris", client=own_fake_gcs.client(),
                   request_timeout_s=2.0, retry_deadline_s=0.5)
    own_fake_gcs.stop()
    shipper = LogShipper(sink, JOB, 0, 0, config=ShipperConfig(retry_initial_s=0.05))
    for i in range(10):
        shipper.write("stdout", f"line {i}\n")
    stats = shipper.close(timeout_s=1.0)
    assert (stats.chunks, stats.dropped_lines, stats.composed) == (0, 10, False)
    assert stats.retries >= 1


def test_shipper_zombie_writer_is_fenced_and_cannot_overwrite(sink, wait_for):
    current = LogShipper(sink, JOB, 0, 3)
    current.write("stdout", "current attempt\n")
    wait_for(lambda: current.stats().chunks == 1, what="current writer's chunk")
    zombie = LogShipper(sink, JOB, 0, 3)
    zombie.write("stdout", "zombie output\n")
    wait_for(lambda: zombie.stats().fenced, what="zombie fenced")
    zombie.write("stdout", "more zombie output\n")
    zstats = zombie.close()
    assert not zstats.composed and zstats.dropped_lines == 2
    current.write("stdout", "still current\n")
    current.close()
    assert _texts(sink) == ["current attempt", "still current"]


def test_shipper_unknown_stream_raises_invalid_request(sink):
    shipper = LogShipper(sink, JOB, 0, 0)
    try:
        with pytest.raises(InvalidRequestError):
            shipper.write("stdin", "x\n")
    finally:
        shipper.close()


def test_shipper_bad_config_raises_invalid_request():
    with pytest.raises(InvalidRequestError):
        ShipperConfig(flush_bytes=10, max_buffer_bytes=5)


def test_shipper_many_tasks_sharing_one_sink_keep_their_lines_apart(sink):
    shippers = [LogShipper(sink, JOB, task, 0, config=ShipperConfig(flush_bytes=256))
                for task in range(4)]

    def run(task):
        for i in range(300):
            shippers[task].write("stdout", f"task {task} line {i}\n")

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for shipper in shippers:
        assert shipper.close().composed
    for task in range(4):
        assert _texts(sink, task=task) == [f"task {task} line {i}" for i in range(300)]
