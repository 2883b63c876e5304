"""The bounded buffer's policy: whole lines, drop oldest with a marker, flush deadlines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iris.logstore.buffer import LogBuffer


def _texts(records):
    return [(r.stream, r.data) for r in records]


def test_buffer_line_split_across_reads_is_kept_whole():
    buf = LogBuffer(max_bytes=1000)
    buf.append("stdout", b"hel", ts=10.0, now=0.0)
    buf.append("stdout", b"lo\nwor", ts=11.0, now=0.1)
    out = buf.take(now=0.2, interval_s=1.0)
    assert _texts(out) == [("stdout", b"hello\n")]
    assert out[0].ts == 10.0  # when the line started
    buf.append("stdout", b"ld\n", ts=12.0, now=0.3)
    assert _texts(buf.take(now=0.4, interval_s=1.0)) == [("stdout", b"world\n")]


def test_buffer_line_without_newline_ships_after_one_interval():
    buf = LogBuffer(max_bytes=1000)
    buf.append("stderr", b"progress 50%", ts=1.0, now=0.0)
    assert not buf.due(now=0.5, interval_s=1.0, flush_bytes=500)
    assert buf.due(now=1.0, interval_s=1.0, flush_bytes=500)
    assert _texts(buf.take(now=1.0, interval_s=1.0)) == [("stderr", b"progress 50%")]
    assert buf.next_due(1.0) is None


def test_buffer_over_limit_drops_oldest_and_marks_the_gap():
    buf = LogBuffer(max_bytes=30)
    for i in range(10):
        buf.append("stdout", f"line {i}\n".encode(), ts=float(i), now=0.0)
    out = buf.take(now=0.0, interval_s=1.0)
    assert out[0].data == "[iris: dropped 6 lines (42 bytes) — log shipping fell behind]\n".encode()
    assert out[0].ts == 0.0 and out[0].stream == "stderr"
    assert [r.data for r in out[1:]] == [f"line {i}\n".encode() for i in range(6, 10)]
    stats = buf.stats()
    assert (stats.dropped_lines, stats.dropped_bytes, stats.lines) == (6, 42, 10)


def test_buffer_due_by_bytes_before_the_interval():
    buf = LogBuffer(max_bytes=1000)
    buf.append("stdout", b"x" * 99 + b"\n", ts=0.0, now=0.0)
    assert buf.due(now=0.0, interval_s=1.0, flush_bytes=100)
    assert not buf.due(now=0.0, interval_s=1.0, flush_bytes=101)


def test_buffer_take_caps_chunk_size_and_keeps_the_rest_due():
    buf = LogBuffer(max_bytes=1000)
    for i in range(10):
        buf.append("stdout", f"line {i}\n".encode(), ts=float(i), now=0.0)
    buf.append("stdout", b"partial", ts=10.0, now=0.0)
    first = buf.take(now=5.0, interval_s=1.0, max_bytes=20)
    assert [r.data for r in first] == [b"line 0\n", b"line 1\n"]
    assert buf.due(now=5.0, interval_s=1.0, flush_bytes=500)
    rest = buf.take(now=5.0, interval_s=1.0)
    assert rest[-1].data == b"partial" and len(rest) == 9
    assert buf.pending_bytes == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]),
                          st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\r", b"\n")),
                          st.booleans()),
                max_size=40))
def test_buffer_without_pressure_ships_every_byte_in_order_per_stream(writes):
    buf = LogBuffer(max_bytes=10_000, max_line_bytes=16)
    shipped: dict[str, bytes] = {"stdout": b"", "stderr": b""}
    written: dict[str, bytes] = {"stdout": b"", "stderr": b""}
    now = 0.0
    for stream, data, flush in writes:
        buf.append(stream, data, ts=now, now=now)
        written[stream] += data
        if flush:
            now += 0.3
            for rec in buf.take(now=now, interval_s=1.0, max_bytes=32):
                shipped[rec.stream] += rec.data
    for rec in buf.take(now=now, interval_s=1.0, final=True):
        shipped[rec.stream] += rec.data
    assert shipped == written
    assert buf.stats().dropped_bytes == 0 and buf.pending_bytes == 0
