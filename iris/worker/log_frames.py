"""Stream-tagged output records: how a Python task keeps stdout and stderr in written order.

Not the reader (output.py) nor the writer's install (task_runtime.py): the record format and
the pure decoder both sides share. No I/O here.

Two pipes cannot tell their reader which of two writes came first: lines printed microseconds
apart to stdout and stderr landed in one poll and ~44 % came out swapped (bench/log_order.py).
So the task runtime writes both of Python's streams to ONE pipe (fd 1, the stdout FIFO), as
records that carry their stream and the wall time of the write:

    MAGIC (4 bytes "\\0\\x1eIR") | stream (1 byte: 1 stdout, 2 stderr) | time (f64 BE, wall
    seconds) | length (u16 BE) | data

A record is at most PIPE_BUF (4,096) bytes, written with one write(2): the kernel makes that
atomic, so raw output of other processes on the same pipe (a subprocess, a C library
writing to fd 1) lands between records, never inside one. Bytes outside records are raw
output of the pipe's own stream. A false MAGIC in raw output (it starts with a NUL byte,
which text does not hold) is checked against the header (stream and length in range) and
otherwise passed on as raw bytes.
"""

from __future__ import annotations

import struct

MAGIC = b"\x00\x1eIR"
_HEADER = struct.Struct(">BdH")  # stream, time, length; no padding
HEADER_BYTES = len(MAGIC) + _HEADER.size  # 15
PIPE_BUF = 4096  # POSIX minimum is 512; Linux's is 4,096 (writes up to it are atomic)
MAX_DATA = PIPE_BUF - HEADER_BYTES
STREAMS = {1: "stdout", 2: "stderr"}
STREAM_IDS = {name: sid for sid, name in STREAMS.items()}
STDOUT_FIFO = "stdout.fifo"  # in the attempt directory: fd 1 of the attempt
STDERR_FIFO = "stderr.fifo"

Segment = tuple[str | None, bytes, float | None]
"""(stream or None for raw bytes of the pipe's own stream, data, the writer's time or None)."""


_RECORD_HEAD = struct.Struct(">4sBdH")  # MAGIC and _HEADER in one pack


def encode(stream: str, data: bytes, ts: float) -> list[bytes]:
    """`data` of `stream` as records of at most PIPE_BUF bytes each (one write(2) each)."""
    sid = STREAM_IDS[stream]
    if len(data) <= MAX_DATA:  # a line: the common case, one record
        return [_RECORD_HEAD.pack(MAGIC, sid, ts, len(data)) + data]
    return [_RECORD_HEAD.pack(MAGIC, sid, ts, len(piece)) + piece
            for piece in (data[i:i + MAX_DATA] for i in range(0, len(data), MAX_DATA))]


def _partial_magic(buf: bytes) -> int:
    """How many bytes at the end of `buf` could start a MAGIC still to be completed."""
    for keep in range(min(len(MAGIC) - 1, len(buf)), 0, -1):
        if MAGIC.startswith(buf[-keep:]):
            return keep
    return 0


def decode(buf: bytes, eof: bool = False) -> tuple[list[Segment], bytes]:
    """Split what a pipe delivered into segments, and the rest to keep for the next read (a
    record or MAGIC cut by the read's end). At `eof` nothing is kept: a cut record is raw."""
    segments: list[Segment] = []
    i = 0
    while True:
        j = buf.find(MAGIC, i)
        if j < 0:
            keep = 0 if eof else _partial_magic(buf[i:])
            if len(buf) - keep > i:
                segments.append((None, buf[i:len(buf) - keep], None))
            return segments, buf[len(buf) - keep:]
        if j > i:
            segments.append((None, buf[i:j], None))
        if len(buf) < j + HEADER_BYTES:
            return _cut(segments, buf, j, eof)
        sid, ts, n = _HEADER.unpack_from(buf, j + len(MAGIC))
        if sid not in STREAMS or n > MAX_DATA:  # not a record: a NUL in raw output
            segments.append((None, buf[j:j + 1], None))
            i = j + 1
            continue
        end = j + HEADER_BYTES + n
        if len(buf) < end:
            return _cut(segments, buf, j, eof)
        segments.append((STREAMS[sid], buf[j + HEADER_BYTES:end], ts))
        i = end


def _cut(segments: list[Segment], buf: bytes, j: int, eof: bool) -> tuple[list[Segment], bytes]:
    if eof:
        segments.append((None, buf[j:], None))
        return segments, b""
    return segments, buf[j:]
