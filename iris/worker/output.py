"""Capture of an attempt's stdout and stderr as lines, through named pipes: no log shipping.

Each stream is a FIFO in the attempt directory. The child gets it open read-write, so it
never sees EPIPE: if the worker dies the child keeps writing into the pipe buffer (64 KiB on
Linux, then it blocks) and a restarted worker that adopts the attempt opens the same FIFO and
drains it; no line is lost across a worker restart. The reader sees EOF once every process
of the attempt has closed the stream, i.e. when the attempt is gone.

Lines come out in the order written when the task's runtime tags them (Python tasks: see
log_frames.py), else in the order read (raw commands: see MergedReader).

The callback runs on the reader thread and must be fast (it is handed to a log shipper).
A line longer than `_MAX_LINE` is delivered in pieces so memory stays bounded.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path

from iris.base.clock import Clock
from iris.worker import log_frames

_log = logging.getLogger(__name__)
_READ_SIZE = 65536
_MAX_LINE = 1 << 20  # 1 MiB: a task printing a huge blob without newlines still streams

OnOutput = Callable[[str, bytes, float], None]
"""on_output(stream name "stdout"/"stderr", one line with its b"\\n" if any, wall time s)."""


# A task printing 20 MB/s blocked ~20 times per run on the default 64 KiB pipe and about
# once on 1 MiB (bench/logs.py); 1 MiB is also Linux's default pipe-max-size for non-root.
PIPE_BYTES = 1 << 20


def make_fifo(path: Path) -> int:
    """Create the FIFO and return the read-write fd to hand to the child."""
    os.mkfifo(path, 0o600)
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # over /proc/sys/fs/pipe-max-size for this user: keep the default
        pass
    return fd


def open_reader(path: Path) -> int:
    """Open a FIFO for reading without waiting for a writer, then make reads blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    return fd


class MergedReader:
    """One thread that reads several pipes to EOF and hands complete lines to `on_output`.

    One thread for stdout and stderr, not one each, so the two streams are read in the order
    their data arrives: with a thread per pipe, a loaded host (or the GIL's 5 ms switch
    interval) let the stderr thread stamp and hand over a line before the stdout thread got
    to a line written earlier, and logs showed a traceback above the prints that led to it.
    Each read is stamped with the wall time when poll() saw it; lines written closer
    together than the reader's wake-up (microseconds idle, milliseconds loaded) and landing
    in the same poll are taken in `pipes` order (stdout first). That is read order, the best
    two pipes allow; Python tasks do better: the task runtime writes both of Python's streams
    as stream-tagged records to the stdout pipe (log_frames), so their lines come out in the
    order written, each stamped with the task's own time of the write.
    """

    def __init__(self, pipes: list[tuple[str, int]], on_output: OnOutput | None,
                 clock: Clock):
        self.name = "+".join(name for name, _ in pipes)
        self._pipes = list(pipes)
        self._on_output = on_output
        self._clock = clock
        self._thread = threading.Thread(target=self._run, name=f"iris-{self.name}-reader",
                                        daemon=True)

    def start(self) -> MergedReader:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _emit(self, name: str, line: bytes, ts: float) -> None:
        if self._on_output is None:
            return
        try:
            self._on_output(name, line, ts)
        except Exception:  # a broken sink must not stop the reader and block the task
            _log.exception("output callback failed for %s", name)

    def _run(self) -> None:
        names = {fd: name for name, fd in self._pipes}
        order = {fd: i for i, (_, fd) in enumerate(self._pipes)}
        lines = {fd: _PipeLines(name) for fd, name in names.items()}
        poller = select.poll()
        for fd in names:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while lines:
                ready = sorted((fd for fd, _ in poller.poll()), key=order.__getitem__)
                ts = self._clock.wall()
                for fd in ready:
                    if fd in lines and not self._read_once(fd, lines[fd], ts):
                        del lines[fd]
                        poller.unregister(fd)
        finally:
            for fd in names:
                os.close(fd)

    def _read_once(self, fd: int, pipe: _PipeLines, ts: float) -> bool:
        """One read of a ready pipe; False (and the rest flushed) at EOF or on an error."""
        try:
            chunk = os.read(fd, _READ_SIZE)
        except OSError as exc:
            _log.warning("reading %s failed: %s", pipe.name, exc)
            chunk = b""
        pipe.feed(chunk, ts, self._emit)
        return bool(chunk)


class _PipeLines:
    """Lines out of one pipe's bytes: raw output of the pipe's own stream, and the task
    runtime's records (log_frames), each stream with its own unfinished line. A record's line
    carries the time the task wrote it; a raw line the time the reader saw it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._undecoded = b""
        self._partial: dict[str, bytes] = {}  # "raw" or a record's stream -> unfinished line

    def feed(self, chunk: bytes, ts: float, emit: OnOutput) -> None:
        """emit(stream, line, time) for each line `chunk` completes (at EOF, `chunk` empty:
        all that is left)."""
        if chunk and not self._undecoded and b"\x00" not in chunk:
            # No NUL byte, so no record: plain output (a memchr, not a decode, per read).
            self._lines("raw", self.name, chunk, ts, emit)
            return
        eof = not chunk
        segments, self._undecoded = log_frames.decode(self._undecoded + chunk, eof)
        for stream, data, when in segments:
            if stream is None:
                self._lines("raw", self.name, data, ts, emit)
            else:
                self._lines(stream, stream, data, _trusted(when, ts), emit)
        if eof:
            for key, rest in self._partial.items():
                if rest:
                    emit(self.name if key == "raw" else key, rest, ts)
            self._partial.clear()

    def _lines(self, key: str, stream: str, data: bytes, when: float, emit: OnOutput) -> None:
        *whole, rest = (self._partial.get(key, b"") + data).split(b"\n")
        for line in whole:
            emit(stream, line + b"\n", when)
        while len(rest) >= _MAX_LINE:
            emit(stream, rest[:_MAX_LINE], when)
            rest = rest[_MAX_LINE:]
        self._partial[key] = rest


# A record's time is the task's to write: one later than its reading, not a number, or older
# than a record can sit in a pipe (a worker restart adopts the attempt within minutes) is
# replaced by the time it was read, so no task can move its lines around a job's log.
_MAX_RECORD_AGE_S = 24 * 3600.0


def _trusted(when: float, read: float) -> float:
    return when if read - _MAX_RECORD_AGE_S <= when <= read else read


def StreamReader(name: str, fd: int, on_output: OnOutput | None,  # noqa: N802
                 clock: Clock) -> MergedReader:
    """A reader of one pipe (adopted attempts reopen their FIFOs one by one)."""
    return MergedReader([(name, fd)], on_output, clock)
