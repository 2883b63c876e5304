"""In-process actors: one instance on a thread of its own, refs that call it directly.

Not Iris's hosting (no node, no sockets). The rules are Iris's: sync methods run on the
actor's thread one at a time, `async def` methods on the backend's event-loop thread; hooks
`on_start`, `on_tick` (every `tick_interval_s`) and `on_stop`; an unknown method is
MethodNotFoundError, arguments that do not fit are BadArgumentsError, a method's exception
reaches the caller as itself with `remote_traceback`. An actor whose method raises
SystemExit dies as a process would: that call and every later one fail with ActorDiedError.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

from iris.actors.future import ActorFuture
from iris.actors.hosting import spec_of
from iris.actors.refs import ActorRef
from iris.backends.common import format_exc, with_remote_traceback
from iris.backends.inprocess.interrupt import TaskKilled, interrupt
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import (
    ActorDiedError,
    BadArgumentsError,
    DeadlineExceededError,
    MethodNotFoundError,
)

_STOP = object()


class LocalActor:
    """One live instance, its mailbox and thread. `run_in` is the contextvars Context its
    code runs in (the backend current at the actor's namespace)."""

    def __init__(self, name: str, cls: type, args: tuple, kwargs: dict,
                 run_in: contextvars.Context, loop: Callable[[], asyncio.AbstractEventLoop],
                 on_death: Callable[[str, LocalActor], None]):
        self.name = name
        self.spec = spec_of(cls)
        self.instance: Any = None
        self.alive = True
        self._args, self._kwargs = args, kwargs
        self._ctx = run_in
        self._loop = loop
        self._on_death = on_death
        self._queue: SimpleQueue = SimpleQueue()
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self.thread = threading.Thread(target=self._ctx.run, args=(self._main,), daemon=True,
                                       name=f"iris-inprocess-actor-{name}")

    def start(self) -> None:
        self.thread.start()
        self._started.wait()
        if self._start_error is not None:
            self.thread.join()
            raise self._start_error

    def stop(self, wait: bool = True) -> None:
        """Stop after the call running now; with `wait`, interrupt that call if it has not
        returned within a second (TaskKilled), then join."""
        self._queue.put(_STOP)
        if wait and threading.current_thread() is not self.thread:
            self.thread.join(timeout=1.0)
            if self.thread.is_alive():
                interrupt(self.thread)
                self.thread.join(timeout=30)

    def call(self, method: str, args: tuple, kwargs: dict, timeout_s: float | None,
             oneway: bool) -> ActorFuture:
        fut = ActorFuture(self.name, method, "inprocess")
        if not self.alive:
            fut.set_exception(ActorDiedError(f"actor {self.name!r} (in process) has died; "
                                             f"{method!r} was not run", actor=self.name))
            return fut
        is_async = self.spec.methods.get(method)
        if is_async is None:
            known = ", ".join(sorted(self.spec.methods)) or "none"
            fut.set_exception(MethodNotFoundError(
                f"actor {self.name!r} has no method {method!r} (public methods: {known})",
                actor=self.name))
            return fut
        if timeout_s is not None:
            _expire_after(self._loop(), fut, timeout_s)
        if is_async:
            self._loop().call_soon_threadsafe(self._start_async, fut, method, args, kwargs)
        else:
            self._queue.put((fut, method, args, kwargs))
        return fut

    # ------------------------------------------------------------ actor thread

    def _main(self) -> None:
        try:
            self.instance = self.spec.cls(*self._args, **self._kwargs)
            if hasattr(self.instance, "on_start"):
                self.instance.on_start()
        except BaseException as exc:
            self._start_error = exc
            self.alive = False
            self._started.set()
            return
        self._started.set()
        for item in self._mailbox():
            if not self._run(*item):
                break
        self._die()

    def _mailbox(self):
        tick = getattr(self.instance, "on_tick", None)
        interval = getattr(self.instance, "tick_interval_s", None)
        clock = SYSTEM_CLOCK
        due = clock.monotonic() + (interval or 0)
        while True:
            if tick is not None and interval and clock.monotonic() >= due:
                tick()
                due = clock.monotonic() + interval
                continue
            try:
                wait = max(due - clock.monotonic(), 0) if tick is not None and interval else None
                item = self._queue.get(timeout=wait)
            except Empty:
                continue
            if item is _STOP:
                return
            yield item

    def _run(self, fut: ActorFuture, method: str, args: tuple, kwargs: dict) -> bool:
        """Run one sync call; False when the actor must die (SystemExit)."""
        if fut.done():  # its deadline passed while it waited: never run it
            return True
        bound = getattr(self.instance, method)
        try:
            inspect.signature(bound).bind(*args, **kwargs)
        except TypeError as exc:
            fut.set_exception(BadArgumentsError(f"{self.name}.{method}: {exc}",
                                                actor=self.name))
            return True
        try:
            fut.set_result(bound(*args, **kwargs))
        except (SystemExit, TaskKilled) as exc:
            how = "exited (SystemExit)" if isinstance(exc, SystemExit) else "was stopped"
            fut.set_exception(ActorDiedError(f"actor {self.name!r} {how} during {method!r}",
                                             actor=self.name))
            return False
        except BaseException as exc:
            fut.set_exception(with_remote_traceback(exc, format_exc(exc),
                                                    f"actor {self.name}.{method}"))
        return True

    def _die(self) -> None:
        self.alive = False
        self._on_death(self.name, self)
        while True:
            try:
                item = self._queue.get_nowait()
            except Empty:
                break
            if item is not _STOP:
                item[0].set_exception(ActorDiedError(
                    f"actor {self.name!r} stopped before {item[1]!r} ran", actor=self.name))
        try:
            if hasattr(self.instance, "on_stop"):
                self.instance.on_stop()
        except Exception:  # a failing hook must not keep the actor half-stopped
            pass

    # ------------------------------------------------------------ loop thread

    def _start_async(self, fut: ActorFuture, method: str, args: tuple, kwargs: dict) -> None:
        async def run() -> None:
            try:
                fut.set_result(await getattr(self.instance, method)(*args, **kwargs))
            except asyncio.CancelledError:
                fut.set_exception(ActorDiedError(f"actor {self.name!r} stopped during "
                                                 f"{method!r}", actor=self.name))
                raise
            except BaseException as exc:
                fut.set_exception(with_remote_traceback(exc, format_exc(exc),
                                                        f"actor {self.name}.{method}"))

        self._ctx.copy().run(asyncio.ensure_future, run())


def _expire_after(loop: asyncio.AbstractEventLoop, fut: ActorFuture, timeout_s: float) -> None:
    def expire() -> None:
        fut.set_exception(DeadlineExceededError(
            f"{fut.actor}.{fut.method} (in process) gave no reply within {timeout_s} s",
            actor=fut.actor))

    loop.call_soon_threadsafe(loop.call_later, timeout_s, expire)


class LocalActorRef(ActorRef):
    """An iris.ActorRef whose calls go straight to an in-process actor."""

    __slots__ = ("_actor",)

    def __init__(self, actor: LocalActor):
        super().__init__(actor.name, None, actor.name)
        self._actor = actor

    def __repr__(self) -> str:
        return f"ActorRef({self.name!r} in process)"

    def __reduce__(self) -> tuple:
        raise TypeError(f"{self!r} lives in this process's in-process backend and cannot be "
                        "pickled to another process; resolve it by name there")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalActorRef) and other._actor is self._actor

    def __hash__(self) -> int:
        return id(self._actor)

    def _call(self, method: str, args: tuple, kwargs: dict, timeout_s: float | None,
              oneway: bool) -> ActorFuture:
        return self._actor.call(method, args, kwargs, timeout_s, oneway)
