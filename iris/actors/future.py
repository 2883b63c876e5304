"""ActorFuture: the result of an actor call, waitable from any thread and awaitable from any loop.

Not the call machinery (node.py) — only the hand-off of one outcome. Completed once, by the
node's loop thread (or by the caller when a call fails before it is sent). A blocking wait
sleeps on its thread's eventfd (wakers.Waker), which the completing thread writes with the
GIL released: a bare lock would wake the waiter while the loop still holds the GIL, and on a
shared core that costs the 1:1 sync call two more context switches.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

from iris.actors import wakers
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import InvalidRequestError, PeerUnavailableError

_log = logging.getLogger(__name__)
_PENDING, _RESULT, _ERROR = 0, 1, 2


class ActorFuture:
    __slots__ = ("_lock", "_state", "_value", "_waiters", "_callbacks", "actor", "method",
                 "address", "_loop_thread", "_defer_wake", "on_error", "on_unavailable",
                 "sent_at")

    def __init__(self, actor: str, method: str, address: str, loop_thread: int = 0,
                 defer_wake: Callable[[list], Any] | None = None):
        self._lock = threading.Lock()
        self._state = _PENDING
        self._value: Any = None
        self._waiters: list | None = None
        self._callbacks: list | None = None
        self.actor = actor
        self.method = method
        self.address = address
        self._loop_thread = loop_thread
        # Completed on the loop thread, the waiters' wake-ups are handed to this (the node's
        # defer_wakes): sent when the loop's pass ends, not in the middle of its drain.
        self._defer_wake = defer_wake
        # Called with the exception when the call fails; cheaper than a done-callback on
        # every call for what only failures need (a ref forgetting a dead address).
        self.on_error: Callable[[BaseException], Any] | None = None
        # Given a bare PeerUnavailableError before it completes this future: returns True
        # when it will complete it itself (a ref asking the registry whether the actor has
        # died, to say so: refs.py), False to let the error through as it is.
        self.on_unavailable: Callable[[ActorFuture, PeerUnavailableError], bool] | None = None
        self.sent_at = 0.0  # loop-clock time the call was sent (for the latency histogram)

    def __repr__(self) -> str:
        state = {_PENDING: "pending", _RESULT: "done", _ERROR: "failed"}[self._state]
        return f"<ActorFuture {self.actor}.{self.method} at {self.address}: {state}>"

    # ------------------------------------------------------------ consumer side

    def done(self) -> bool:
        return self._state != _PENDING

    def result(self, timeout: float | None = None) -> Any:
        """The method's return value; raises what the method raised or why the call failed.

        `timeout` (seconds) bounds this wait only: on expiry TimeoutError is raised and the
        call stays pending (its own deadline still applies).
        """
        if self._state == _PENDING:
            self._wait(timeout)
        if self._state == _ERROR:
            raise self._value
        return self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == _PENDING:
            self._wait(timeout)
        return self._value if self._state == _ERROR else None

    def add_done_callback(self, fn: Callable[[ActorFuture], Any]) -> None:
        """Call fn(self) when done, in the thread that completes it (keep it short)."""
        with self._lock:
            if self._state == _PENDING:
                if self._callbacks is None:
                    self._callbacks = [fn]
                else:
                    self._callbacks.append(fn)
                return
        fn(self)

    def __await__(self):
        if self._state == _PENDING:
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()

            def wake(_: ActorFuture) -> None:
                if asyncio._get_running_loop() is loop:
                    _resolve(waiter)
                else:
                    loop.call_soon_threadsafe(_resolve, waiter)

            self.add_done_callback(wake)
            yield from waiter.__await__()
        return self.result()

    def _wait(self, timeout: float | None) -> None:
        if self._loop_thread and threading.get_ident() == self._loop_thread:
            raise RuntimeError(
                f"blocking on {self.actor}.{self.method} from the node's event loop would "
                "deadlock it: use `await` in async code"
            )
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, int | float) or math.isnan(timeout)):  # failed deep in the wait
            raise InvalidRequestError(f"timeout: expected None or a number of seconds, got "
                                      f"{type(timeout).__name__} {timeout!r}", "timeout")
        waker = wakers.this_thread()
        with self._lock:
            if self._state != _PENDING:
                return
            if self._waiters is None:
                self._waiters = [waker]
            else:
                self._waiters.append(waker)
        # A wake meant for an earlier future (its wait timed out first) may be pending: the
        # state decides, and a timed wait woken early sleeps again for what is left.
        deadline = None if timeout is None else SYSTEM_CLOCK.monotonic() + max(timeout, 0)
        while self._state == _PENDING:
            left = None if deadline is None else deadline - SYSTEM_CLOCK.monotonic()
            if left is not None and left <= 0 or not waker.wait(left):
                with self._lock:
                    if self._state != _PENDING:
                        return
                    self._waiters.remove(waker)
                raise TimeoutError(
                    f"{self.actor}.{self.method} at {self.address} gave no result within "
                    f"{timeout} s (the call is still pending)"
                )

    # ------------------------------------------------------------ producer side

    def set_result(self, value: Any) -> bool:
        return self._finish(_RESULT, value)

    def set_exception(self, exc: BaseException) -> bool:
        hook = self.on_unavailable
        if hook is not None and type(exc) is PeerUnavailableError and self._state == _PENDING:
            self.on_unavailable = None
            if hook(self, exc):
                return True
        return self._finish(_ERROR, exc)

    def _finish(self, state: int, value: Any) -> bool:
        with self._lock:
            if self._state != _PENDING:
                return False
            self._state = state
            self._value = value
            waiters, self._waiters = self._waiters, None
            callbacks, self._callbacks = self._callbacks, None
        if state == _ERROR and self.on_error is not None:
            self.on_error(value)
        if waiters:
            if self._defer_wake is not None and threading.get_ident() == self._loop_thread:
                self._defer_wake(waiters)
            else:
                for waker in waiters:
                    waker.wake()
        if callbacks:
            for fn in callbacks:
                try:
                    fn(self)
                except Exception:  # a caller's callback must not break the node's loop
                    _log.exception("done-callback of %r raised", self)
        return True


def _resolve(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def completed(value: Any, *, actor: str = "", method: str = "", address: str = "") -> ActorFuture:
    fut = ActorFuture(actor, method, address)
    fut.set_result(value)
    return fut


def failed(exc: BaseException, *, actor: str = "", method: str = "",
           address: str = "") -> ActorFuture:
    fut = ActorFuture(actor, method, address)
    fut.set_exception(exc)
    return fut
