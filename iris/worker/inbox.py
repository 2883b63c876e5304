"""Messages to an actor from other threads, run on the actor's own turn. Not a mailbox of
calls (hosting.py has that): the way executor work reports back to the actor that began it.

Any thread may `post(fn, *args)`; the actor calls `drain()` from its own turn (its tick, or
the in-process cast `wake` asks for), and each message runs there, in the order posted. So
state that only messages change needs no lock. `urgent` messages wake the actor at once
instead of at its next tick; one cast covers any number of them posted before it drains.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

_log = logging.getLogger(__name__)


class Inbox:
    def __init__(self, wake: Callable[[], None]):
        self._queue: SimpleQueue = SimpleQueue()
        self._wake = wake
        self._woken = threading.Event()  # a wake is on its way: no second cast needed

    def post(self, fn: Callable[..., None], *args: Any, urgent: bool = False) -> None:
        self._queue.put((fn, args))
        if urgent and not self._woken.is_set():
            self._woken.set()
            self._wake()

    def drain(self) -> int:
        """Run every message posted so far (on the actor's turn); how many ran."""
        self._woken.clear()  # before reading: a message posted after this wakes us again
        ran = 0
        while True:
            try:
                fn, args = self._queue.get_nowait()
            except Empty:
                return ran
            try:
                fn(*args)
            except Exception:  # one bad message must not hold back the rest
                _log.exception("message %s to the actor failed", fn)
            ran += 1
