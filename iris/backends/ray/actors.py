"""Iris actors on Ray: the class Ray runs, and the iris.ActorRef that calls it.

Not the backend. Ray runs a subclass of the user's @iris.actor class whose public methods
first make the Ray backend current in the Ray worker (at the spawner's namespace), so an
actor's own `iris.*` calls stay on Ray; `on_start` runs after construction as on Iris.
Ray's per-call timeout does not exist: `.options(timeout=s)` fails the future with
DeadlineExceededError after `s` (the method itself runs on).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from iris.actors.future import ActorFuture
from iris.actors.hosting import spec_of
from iris.actors.refs import ActorRef
from iris.backends.ray import runtime
from iris.base.errors import DeadlineExceededError, MethodNotFoundError


def actor_class(cls: type, namespace: str) -> type:
    """A subclass of `cls` whose methods run with the Ray backend current."""
    spec = spec_of(cls)
    body: dict[str, Any] = {}
    for name, is_async in spec.methods.items():
        body[name] = _async_method(getattr(cls, name), namespace) if is_async \
            else _sync_method(getattr(cls, name), namespace)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        runtime.enter(namespace)
        cls.__init__(self, *args, **kwargs)
        if hasattr(self, "on_start"):
            self.on_start()

    body["__init__"] = __init__
    body["__module__"] = cls.__module__
    body["__qualname__"] = cls.__qualname__
    return type(cls.__name__, (cls,), body)


def _sync_method(fn: Any, namespace: str) -> Any:
    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        runtime.enter(namespace)
        return fn(self, *args, **kwargs)
    return method


def _async_method(fn: Any, namespace: str) -> Any:
    @functools.wraps(fn)
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        runtime.enter(namespace)
        return await fn(self, *args, **kwargs)
    return method


class RayActorRef(ActorRef):
    """An iris.ActorRef over a Ray actor handle (picklable: Ray handles travel)."""

    __slots__ = ("_handle",)

    def __init__(self, name: str, handle: Any):
        super().__init__(name, None, name)
        self._handle = handle

    def __repr__(self) -> str:
        return f"ActorRef({self.name!r} on Ray)"

    def __reduce__(self) -> tuple:
        return (RayActorRef, (self.name, self._handle))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RayActorRef) and other._handle == self._handle

    def __hash__(self) -> int:
        return hash(self._handle)

    @property
    def handle(self) -> Any:
        return self._handle

    def _call(self, method: str, args: tuple, kwargs: dict, timeout_s: float | None,
              oneway: bool) -> ActorFuture:
        try:
            remote = getattr(self._handle, method)
        except AttributeError:
            fut = ActorFuture(self.name, method, "ray")
            fut.set_exception(MethodNotFoundError(f"actor {self.name!r} has no method "
                                                  f"{method!r}", actor=self.name))
            return fut
        fut = runtime.future_of(remote.remote(*args, **kwargs), self.name, method)
        if timeout_s is not None:
            _expire(fut, timeout_s)
        return fut


def _expire(fut: ActorFuture, timeout_s: float) -> None:
    def expire() -> None:
        fut.set_exception(DeadlineExceededError(
            f"{fut.actor}.{fut.method} (Ray) gave no reply within {timeout_s} s",
            actor=fut.actor))

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    fut.add_done_callback(lambda _: timer.cancel())
