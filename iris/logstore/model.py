"""Log lines, the chunk encoding and the object layout: pure data, no I/O.

Layout under a sink (the sink adds its own bucket/prefix or root directory):

    jobs/{job path}/_tasks/{task}/attempts/{attempt}/chunks/{seq:010d}   immutable chunks
    jobs/{job path}/_tasks/{task}/attempts/{attempt}/log                 all chunks, composed

A job path like `/alice/train` becomes `jobs/alice/train/_tasks/...`. Job path components
must start with a letter or digit (iris.base.ids), so `_tasks` can never be a job name and a
child job's objects (`jobs/alice/train/eval/_tasks/...`) never fall under its parent's
`_tasks/` prefix.

A chunk is a msgpack stream: one header map, then record maps. Each record holds one read
from a task pipe: a wall timestamp (epoch seconds), the stream (stdout, stderr, or `build`:
the worker's environment build, uv's output, kept apart from what the task printed), and
one or more lines as raw bytes (a task
may print bytes that are not UTF-8; they are decoded only for display). Because every chunk
starts with its own header, a chunk decodes alone and the composed `log` (the chunks
concatenated) decodes with the same code, each record still knowing its chunk's seq.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import msgpack

from iris.base.errors import InvalidRequestError
from iris.base.ids import normalize_path
from iris.logstore.errors import LogStorageError

FORMAT_VERSION = 1
STREAMS = ("stdout", "stderr", "build")
TASK_STREAMS = ("stdout", "stderr")
"""What the task itself printed; `build` is the environment build before it started."""
_STREAM_CODE = {name: code for code, name in enumerate(STREAMS)}
_REL_KEY = re.compile(r"^(\d+)/attempts/(\d+)/(?:chunks/(\d{10})|(log))$")


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line a task printed, without its newline. `ts` is wall-clock epoch seconds (UTC)
    when the worker read it from the pipe; `iso` is the same instant as ISO-8601."""

    ts: float
    stream: str
    task: int
    attempt: int
    text: str

    @property
    def iso(self) -> str:
        """`2026-11-25T09:04:15.123Z`: the time as a person (and `date -d`) reads it."""
        return iso_time(self.ts)

    def to_dict(self) -> dict:
        """The JSON shape of a line (`iris job logs --json`, the dashboard's log API)."""
        return {"ts": self.ts, "time": self.iso, "stream": self.stream, "task": self.task,
                "attempt": self.attempt, "text": self.text}


def iso_time(ts: float) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Record:
    """One pipe read as stored: `data` is one or more lines (the last may lack its newline)."""

    ts: float
    stream: str
    data: bytes


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    job: str
    task: int
    attempt: int
    seq: int


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What a key under a job's `_tasks/` prefix names: a chunk (seq set) or the composed log."""

    task: int
    attempt: int
    seq: int | None


def check_job(job: str) -> str:
    try:
        path = normalize_path(job)
    except ValueError as exc:
        raise InvalidRequestError(f"invalid job id for logs: {exc}", field="job") from exc
    if path == "/":
        raise InvalidRequestError("invalid job id for logs: '/' names no job", field="job")
    return path


def _check_index(value: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidRequestError(f"{what} must be an integer >= 0, got {value!r}", field=what)
    return value


def job_prefix(job: str) -> str:
    """The prefix holding every task of `job` (and nothing of its child jobs)."""
    return f"jobs{check_job(job)}/_tasks/"


def attempt_prefix(job: str, task: int, attempt: int) -> str:
    _check_index(task, "task")
    _check_index(attempt, "attempt")
    return f"{job_prefix(job)}{task}/attempts/{attempt}/"


def chunk_key(job: str, task: int, attempt: int, seq: int) -> str:
    return f"{attempt_prefix(job, task, attempt)}chunks/{_check_index(seq, 'seq'):010d}"


def log_key(job: str, task: int, attempt: int) -> str:
    return f"{attempt_prefix(job, task, attempt)}log"


def parse_key(job_tasks_prefix: str, key: str) -> ObjectRef | None:
    """Name a key listed under `job_prefix(job)`; None for anything else (e.g. compose temps)."""
    if not key.startswith(job_tasks_prefix):
        return None
    match = _REL_KEY.match(key[len(job_tasks_prefix):])
    if match is None:
        return None
    seq = int(match.group(3)) if match.group(3) is not None else None
    return ObjectRef(task=int(match.group(1)), attempt=int(match.group(2)), seq=seq)


def encode_chunk(header: ChunkHeader, records: list[Record]) -> bytes:
    packer = msgpack.Packer(use_bin_type=True)
    parts = [packer.pack({"v": FORMAT_VERSION, "job": header.job, "task": header.task,
                          "attempt": header.attempt, "seq": header.seq})]
    for rec in records:
        parts.append(packer.pack({"t": rec.ts, "s": _STREAM_CODE[rec.stream], "b": rec.data}))
    return b"".join(parts)


_FEED_BYTES = 4 * 1024 * 1024
"""Decode a composed log in slices: msgpack's Unpacker refuses a buffer over its limit
(100 MiB by default) and a long task's log is bigger than that."""


def decode_chunks(data: bytes) -> Iterator[tuple[ChunkHeader, Record]]:
    """Records of one chunk or of a composed log, each with the header of its chunk."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True,
                                max_buffer_size=4 * _FEED_BYTES)
    view = memoryview(data)
    header: ChunkHeader | None = None
    try:
        for start in range(0, len(data), _FEED_BYTES):
            unpacker.feed(view[start:start + _FEED_BYTES])
            for obj in unpacker:
                header, rec = _decode_object(obj, header)
                if rec is not None:
                    yield header, rec
        if unpacker.tell() != len(data):
            raise ValueError(f"truncated after {unpacker.tell()} of {len(data)} bytes")
    except (ValueError, KeyError, IndexError, TypeError, msgpack.UnpackException) as exc:
        raise LogStorageError(f"malformed log chunk: {exc}", transient=False) from exc


def _decode_object(obj: object, header: ChunkHeader | None
                   ) -> tuple[ChunkHeader, Record | None]:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a map, got {type(obj).__name__}")
    if "v" in obj:
        if obj["v"] != FORMAT_VERSION:
            raise ValueError(f"unsupported log format version {obj['v']!r}")
        return ChunkHeader(obj["job"], obj["task"], obj["attempt"], obj["seq"]), None
    if header is None:
        raise ValueError("record before any chunk header")
    return header, Record(float(obj["t"]), STREAMS[obj["s"]], bytes(obj["b"]))


def split_lines(header: ChunkHeader, rec: Record) -> list[LogLine]:
    """The lines of one record, decoded for display (bad UTF-8 becomes U+FFFD)."""
    text = rec.data.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    return [LogLine(rec.ts, rec.stream, header.task, header.attempt, line)
            for line in text.split("\n")]


def format_line(line: LogLine, timestamps: bool = False) -> str:
    """How `iris job logs` shows a line merged from many tasks: `[task 0/attempt 0] text`;
    with `timestamps`, the ISO time first; stderr and build lines say their stream."""
    stream = "" if line.stream == "stdout" else f" {line.stream}"
    when = f"{line.iso} " if timestamps else ""
    return f"{when}[task {line.task}/attempt {line.attempt}{stream}] {line.text}"
