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


class StreamReader:
    """A thread that reads one fd to EOF and hands complete lines to `on_output`."""

    def __init__(self, name: str, fd: int, on_output: OnOutput | None, clock: Clock):
        self.name = name
        self._fd = fd
        self._on_output = on_output
        self._clock = clock
        self._thread = threading.Thread(target=self._run, name=f"iris-{name}-reader",
                                        daemon=True)

    def start(self) -> StreamReader:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _emit(self, line: bytes) -> None:
        if self._on_output is None:
            return
        try:
            self._on_output(self.name, line, self._clock.wall())
        except Exception:  # a broken sink must not stop the reader and block the task
            _log.exception("output callback failed for %s", self.name)

    def _run(self) -> None:
        pending = b""
        try:
            while True:
                chunk = os.read(self._fd, _READ_SIZE)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._emit(line + b"\n")
                while len(pending) >= _MAX_LINE:
                    self._emit(pending[:_MAX_LINE])
                    pending = pending[_MAX_LINE:]
        except OSError as exc:
            _log.warning("reading %s failed: %s", self.name, exc)
        finally:
            if pending:
                self._emit(pending)
            os.close(self._fd)
