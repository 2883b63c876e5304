"""The stream-tagged record format: what the reader makes of any bytes a pipe delivers."""

from __future__ import annotations

from iris.worker import log_frames


def _decode_in_pieces(data: bytes, size: int) -> list[tuple]:
    out, rest = [], b""
    for i in range(0, len(data), size):
        segments, rest = log_frames.decode(rest + data[i:i + size])
        out.extend(segments)
    segments, rest = log_frames.decode(rest, eof=True)
    assert rest == b""
    return out + segments


def _joined(segments: list[tuple]) -> list[tuple]:
    """Adjacent segments of one stream merged (reads cut raw bytes anywhere)."""
    out: list[list] = []
    for stream, data, _ in segments:
        if out and out[-1][0] == stream:
            out[-1][1] += data
        else:
            out.append([stream, data])
    return [tuple(x) for x in out]


def test_records_and_raw_bytes_decode_the_same_however_reads_cut_them():
    data = (b"raw before\n" + b"".join(log_frames.encode("stderr", b"err 1\n", 1.5))
            + b"raw \x00 with a NUL\n" + b"".join(log_frames.encode("stdout", b"o" * 5000, 2.0))
            + b"\x00\x1eI")
    want = [(None, b"raw before\n"), ("stderr", b"err 1\n"), (None, b"raw \x00 with a NUL\n"),
            ("stdout", b"o" * 5000), (None, b"\x00\x1eI")]
    for size in (1, 3, 7, 100, 4096, len(data)):
        assert _joined(_decode_in_pieces(data, size)) == want, size


def test_record_keeps_writer_time_and_never_exceeds_pipe_buf():
    records = log_frames.encode("stdout", b"x" * 10_000, 123.25)
    assert len(records) == 3 and all(len(r) <= log_frames.PIPE_BUF for r in records)
    segments, rest = log_frames.decode(b"".join(records))
    assert rest == b"" and {s[2] for s in segments} == {123.25}


def test_false_magic_with_bad_header_is_raw_output():
    fake = log_frames.MAGIC + b"\x07" + b"\x00" * 10 + b"after\n"
    segments, rest = log_frames.decode(fake, eof=True)
    assert rest == b"" and b"".join(d for _, d, _ in segments) == fake
    assert all(s is None for s, _, _ in segments)


def test_reader_replaces_a_record_time_that_cannot_be_true_by_the_read_time(tmp_path):
    import math
    import os

    from iris.base.clock import FakeClock
    from iris.worker.output import MergedReader, make_fifo, open_reader

    clock = FakeClock()
    now = clock.wall()
    fifo = tmp_path / "stdout.fifo"
    writer, reader = make_fifo(fifo), open_reader(fifo)
    got: list = []
    lines = MergedReader([("stdout", reader)], lambda s, line, t: got.append((s, line, t)),
                         clock).start()
    for ts in (now - 5.0, now + 3600.0, math.nan, -1e300, math.inf):
        os.write(writer, b"".join(log_frames.encode("stderr", f"{ts}\n".encode(), ts)))
    os.close(writer)
    assert lines.join(60)
    assert [t for _, _, t in got] == [now - 5.0, now, now, now, now]  # only the first kept
    assert {s for s, _, _ in got} == {"stderr"}
