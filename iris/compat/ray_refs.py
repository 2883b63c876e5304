"""The Ray-shaped layer's object refs and how refs in a call's arguments are resolved.

Not the verbs (ray.py). A ref passed to `.remote()`, at the top level or inside a list,
tuple or dict (or anything else pickled with the call), is resolved as Ray would: an object
from `ray.put` is fetched inside the task (not sent along with the call); a task's or a
call's ref is waited for by the caller before it submits (Ray waits in its scheduler), and
travels as a ref that is ready, so the task can still `ray.get` it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import iris
from iris.base import errors as _errors

__all__ = ["CallRef", "FailedRef", "ObjectRef", "PutRef", "TaskRef", "call", "fetch_args", "lazy_args"]


class ObjectRef:
    """What `.remote()` and `put` return; `ray.get` reads it, `ray.wait` waits on it."""

    def done(self) -> bool:
        raise NotImplementedError

    def result(self, timeout: float | None = None) -> Any:
        raise NotImplementedError


class _ReadyRef(ObjectRef):
    """A task's or call's ref after it travelled inside another call: its value, in hand."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return "ObjectRef(ready)"

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        return self.value


class FailedRef(ObjectRef):
    """A call that was never sent (its actor was killed): `ray.get` raises `error`."""

    def __init__(self, error: BaseException):
        self.error = error

    def __repr__(self) -> str:
        return "ObjectRef(failed)"

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        raise self.error


class TaskRef(ObjectRef):
    def __init__(self, job: Any):
        self.job = job

    def __repr__(self) -> str:
        return f"ObjectRef(task {self.job.job_id})"

    def __reduce__(self) -> tuple:
        return (_ReadyRef, (self.result(),))

    def done(self) -> bool:
        return self.job.done()

    @property
    def add_done_callback(self) -> Any:
        """The job's, when it can call back (in process); else None: iris.wait polls."""
        return getattr(self.job, "add_done_callback", None)

    def result(self, timeout: float | None = None) -> Any:
        return self.job.result(timeout)


class CallRef(ObjectRef):
    def __init__(self, future: Any, actor: str, method: str):
        self.future, self.actor, self.method = future, actor, method

    def __repr__(self) -> str:
        return f"ObjectRef({self.future.actor}.{self.future.method})"

    def __reduce__(self) -> tuple:
        return (_ReadyRef, (self.result(),))

    def done(self) -> bool:
        return self.future.done()

    def add_done_callback(self, fn: Any) -> None:
        self.future.add_done_callback(lambda _: fn(self))

    def result(self, timeout: float | None = None) -> Any:
        """The reply; a call to an actor that is gone (its name withdrawn as it died) is
        ActorDiedError, which `ray.exceptions.RayActorError` catches, as on Ray."""
        try:
            return self.future.result(timeout)
        except _errors.ActorNotFoundError as exc:
            raise _errors.ActorDiedError(
                f"actor {self.actor!r} is gone (it died or was killed); {self.method!r} was "
                f"not run: {exc}", actor=self.actor, method=self.method) from exc


class PutRef(ObjectRef):
    def __init__(self, ref: iris.ObjectRef):
        self.ref = ref

    def __repr__(self) -> str:
        return f"ObjectRef(put {self.ref.oid[:12]})"

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        return iris.get(self.ref, timeout)


class _Fetch:
    """A put object travelling to a task by reference: fetched there, on its backend."""

    def __init__(self, ref: iris.ObjectRef):
        self.ref = ref


def lazy_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Top-level refs as Ray resolves them: put objects to fetch where the call runs, the
    values of tasks and calls (waited for here)."""
    def one(value: Any) -> Any:
        if isinstance(value, PutRef):
            return _Fetch(value.ref)
        if isinstance(value, ObjectRef):
            return value.result()
        return value

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def fetch_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def one(value: Any) -> Any:
        return iris.get(value.ref) if isinstance(value, _Fetch) else value

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def call(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """The task body: fetch put objects, then call the user's function (positional-only
    `fn`, so the user's own keyword `fn=` reaches theirs); an `async def` one is run to
    its end on a loop of its own, as Ray runs async tasks."""
    args, kwargs = fetch_args(args, kwargs)
    value = fn(*args, **kwargs)
    return asyncio.run(value) if inspect.iscoroutine(value) else value
