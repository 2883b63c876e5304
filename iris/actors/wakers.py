"""Hand-offs between threads that release the GIL while they wake: an eventfd per sleeping
thread (Waker) and an actor's mailbox built on one (Mailbox).

Not the event loop's own wake-up (node.py) nor futures (future.py), which use these.

Why not threading.Lock or queue.SimpleQueue: those wake the sleeper while the waker still
holds the GIL. When both threads share a core (any loaded machine), the woken thread preempts
the waker, finds the GIL held, sleeps again, and wakes a second time when the waker lets go.
A round trip between two threads here: 12.9 us through locks, 7.4 us through eventfds
written with the GIL released (bench/call_costs.py, best runs); on the loaded machine
66-70 us and 2.8-5.6 context switches against 23-45 us and 1. A 1:1 actor call crosses four
such hand-offs (caller -> its loop, the actor's loop -> its thread, and back).
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from collections.abc import Callable
from queue import Empty
from typing import Any

from iris.base import signals
from iris.base.clock import SYSTEM_CLOCK

_ONE = (1).to_bytes(8, "little")
_SLICE_MS = int(signals.SLICE_S * 1000)


class Waker:
    """An eventfd one thread sleeps on and any thread wakes. A wake that finds nobody
    waiting is kept (the next wait returns at once), so waiters re-check their condition."""

    __slots__ = ("_fd", "_write_fd", "_poll", "_last_call", "__weakref__")

    def __init__(self) -> None:
        if hasattr(os, "eventfd"):
            self._fd = self._write_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        else:  # not Linux: a pipe does the same, one byte a wake
            self._fd, self._write_fd = os.pipe()
            os.set_blocking(self._fd, False)
            os.set_blocking(self._write_fd, False)
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._last_call: Any = None  # the future of this thread's last call (follows())

    def follows(self, call: Any) -> bool:
        """Record `call` (a future) as this thread's latest; True if the one before it is
        done: a thread that waits for each answer (a 1:1 caller), which will sleep on this
        call next and is best woken without the GIL (Node._post, idle). With a call still
        in flight it is sending a batch, which the loop takes whole when woken the other
        way."""
        last, self._last_call = self._last_call, call
        return last is None or last.done()

    def fileno(self) -> int:
        return self._fd

    def wake(self) -> None:
        try:
            os.write(self._write_fd, _ONE)  # the GIL is released during the write
        except BlockingIOError:  # a full pipe (not eventfd) is awake enough
            pass

    def wait(self, timeout_s: float | None) -> bool:
        """Sleep until woken (True) or `timeout_s` passes (False); None waits forever."""
        ms = -1 if timeout_s is None else max(0, int(timeout_s * 1000 + 0.999))
        if (ms < 0 or ms > _SLICE_MS) and threading.current_thread() is threading.main_thread():
            return self._wait_in_slices(ms)
        if not self._poll.poll(ms):
            return False
        self.clear()
        return True

    def _wait_in_slices(self, ms: int) -> bool:
        """The main thread's long waits (a call's `.result()`, a job's `wait`): in slices, so
        a Ctrl-C or SIGTERM the kernel handed to another thread runs its handler here within
        a slice (iris/base/signals.py says why one unbounded wait never would)."""
        end = None if ms < 0 else SYSTEM_CLOCK.monotonic() + ms / 1000
        while True:
            step = _SLICE_MS if end is None else \
                min(_SLICE_MS, max(0, int((end - SYSTEM_CLOCK.monotonic()) * 1000 + 0.999)))
            if self._poll.poll(step):
                self.clear()
                return True
            if end is not None and SYSTEM_CLOCK.monotonic() >= end:
                return False

    def clear(self) -> None:
        try:
            os.read(self._fd, 1 << 16)  # an eventfd reads its 8-byte count; a pipe, every byte
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            if self._write_fd != self._fd:
                os.close(self._write_fd)
            self._fd = self._write_fd = -1

    def __del__(self) -> None:
        self.close()


class _ThreadWaker(threading.local):
    waker: Waker | None = None


# Per thread, like codec's msgpack packer: its own Waker, made on first use (an eventfd),
# closed when the thread ends. Not shared state: each thread only ever sees its own.
_mine = _ThreadWaker()


def _forget_after_fork() -> None:
    _mine.waker = None  # the parent's eventfd, shared after fork: the child makes its own


os.register_at_fork(after_in_child=_forget_after_fork)


def this_thread() -> Waker:
    """The calling thread's Waker (one eventfd per thread that ever waits on a future)."""
    waker = _mine.waker
    if waker is None:
        waker = _mine.waker = Waker()
    return waker


class Mailbox:
    """A FIFO many threads put into and one thread takes from, sleeping on a Waker when it is
    empty. Like queue.SimpleQueue (put, get with a timeout raising queue.Empty, qsize,
    empty), but a put wakes the taker only when it sleeps, and without the GIL."""

    __slots__ = ("_items", "_waker", "_sleeping")

    def __init__(self) -> None:
        self._items: deque = deque()
        self._waker = Waker()
        self._sleeping = False

    def put(self, item: Any, defer: Callable[[list], Any] | None = None) -> None:
        """Add `item`; wake the taker if it sleeps, now or (`defer`, on a node's loop thread:
        Node.defer_wakes) when the loop's pass ends."""
        self._items.append(item)
        if self._sleeping:  # read after the append: see get()
            # Claim the wake: later puts before the taker runs must not each wake it again
            # (a loop dispatching a burst did one write per call, each a GIL hand-off).
            self._sleeping = False
            if defer is None:
                self._waker.wake()
            else:
                defer([self._waker])

    def get(self, timeout: float | None = None) -> Any:
        """The oldest item; with `timeout` (s), raises queue.Empty if none came by then, or
        sooner after a stale wake-up (callers that wait with a timeout loop anyway)."""
        items = self._items
        while True:
            if items:
                return items.popleft()
            # Announce the sleep, then look again: a put that appended before the flag was
            # set is seen here; one that appends after it sees the flag and wakes us.
            self._sleeping = True
            if items:
                self._sleeping = False
                return items.popleft()
            self._waker.wait(timeout)
            self._sleeping = False
            if items:
                return items.popleft()
            if timeout is not None:
                raise Empty

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def close(self) -> None:
        self._waker.close()
