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
