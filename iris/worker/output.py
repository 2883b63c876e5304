"""Capture of an attempt's stdout and stderr as lines, through named pipes: no log shipping.

Each stream is a FIFO in the attempt directory. The child gets it open read-write, so it
never sees EPIPE: if the worker dies the child keeps writing into the pipe buffer (64 KiB on
Linux, then it blocks) and a restarted worker that adopts the attempt opens the same FIFO and
drains it; no line is lost across a worker restart. The reader sees EOF once every process
of the attempt has closed the stream, i.e. when the attempt is gone.

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
    in the same poll are taken in `pipes` order (stdout first).
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
        pending = dict.fromkeys(names, b"")
        poller = select.poll()
        for fd in names:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while pending:
                ready = sorted((fd for fd, _ in poller.poll()), key=order.__getitem__)
                ts = self._clock.wall()
                for fd in ready:
                    if fd in pending and not self._read_once(fd, names[fd], pending, ts):
                        poller.unregister(fd)
        finally:
            for fd in names:
                os.close(fd)

    def _read_once(self, fd: int, name: str, pending: dict[int, bytes], ts: float) -> bool:
        """One read of a ready pipe; False (and the rest flushed) at EOF or on an error."""
        try:
            chunk = os.read(fd, _READ_SIZE)
        except OSError as exc:
            _log.warning("reading %s failed: %s", name, exc)
            chunk = b""
        if not chunk:
            rest = pending.pop(fd)
            if rest:
                self._emit(name, rest, ts)
            return False
        *lines, rest = (pending[fd] + chunk).split(b"\n")
        for line in lines:
            self._emit(name, line + b"\n", ts)
        while len(rest) >= _MAX_LINE:
            self._emit(name, rest[:_MAX_LINE], ts)
            rest = rest[_MAX_LINE:]
        pending[fd] = rest
        return True


def StreamReader(name: str, fd: int, on_output: OnOutput | None,  # noqa: N802
                 clock: Clock) -> MergedReader:
    """A reader of one pipe (adopted attempts reopen their FIFOs one by one)."""
    return MergedReader([(name, fd)], on_output, clock)
