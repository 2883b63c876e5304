"""A Ray-shaped layer over `iris.*`, for the mechanical port: `from iris.compat import ray`.

Not Ray: every call below maps onto the neutral API (iris.submit, spawn, resolve, get, wait,
put), so a ported program runs on whichever backend is current: in process, an Iris
cluster, or Ray itself. docs/migrating-from-ray.md has the table of what maps one to one,
what maps with a change, and what is refused (a RefusedError naming the feature and what
to use instead). In short:

    @ray.remote / @ray.remote(num_cpus=2)      a job per `.remote()` call (one Ray task)
    @ray.remote class                           iris.spawn (an actor job), handle.m.remote()
    ray.get / ray.wait / ray.put                iris.get / iris.wait / iris.put
    ray.get_actor(name) / ray.kill(handle)      iris.resolve / the actor's job killed

A ref passed as a top-level argument to `.remote()` is resolved as Ray would: an object
from `ray.put` is fetched inside the task (not sent along with the call); a task's or a
call's ref is waited for by the caller before it submits (Ray waits in its scheduler).
"""

from __future__ import annotations

import functools
import types
import uuid
from typing import Any

import iris
from iris.actors.hosting import spec_of
from iris.backends.api import spawn_job
from iris.base import errors as _errors
from iris.compat.ray_options import (
    ACTOR_OPTIONS,
    RefusedError,
    check_known,
    init_env,
    resources_of,
    task_submit_options,
)
from iris.compat.ray_options import (
    runtime_env as env_options,
)

# ---------------------------------------------------------------- refs

class ObjectRef:
    """What `.remote()` and `put` return; `ray.get` reads it, `ray.wait` waits on it."""

    def done(self) -> bool:
        raise NotImplementedError

    def result(self, timeout: float | None = None) -> Any:
        raise NotImplementedError


class _TaskRef(ObjectRef):
    def __init__(self, job: Any):
        self.job = job

    def __repr__(self) -> str:
        return f"ObjectRef(task {self.job.job_id})"

    def done(self) -> bool:
        return self.job.done()

    @property
    def add_done_callback(self) -> Any:
        """The job's, when it can call back (in process); else None: iris.wait polls."""
        return getattr(self.job, "add_done_callback", None)

    def result(self, timeout: float | None = None) -> Any:
        return self.job.result(timeout)


class _CallRef(ObjectRef):
    def __init__(self, future: Any):
        self.future = future

    def __repr__(self) -> str:
        return f"ObjectRef({self.future.actor}.{self.future.method})"

    def done(self) -> bool:
        return self.future.done()

    def add_done_callback(self, fn: Any) -> None:
        self.future.add_done_callback(lambda _: fn(self))

    def result(self, timeout: float | None = None) -> Any:
        return self.future.result(timeout)


class _PutRef(ObjectRef):
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


def _lazy_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def one(value: Any) -> Any:
        if isinstance(value, _PutRef):
            return _Fetch(value.ref)
        if isinstance(value, ObjectRef):
            return value.result()
        return value

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def _fetch_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def one(value: Any) -> Any:
        return iris.get(value.ref) if isinstance(value, _Fetch) else value

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """The task body: fetch put objects, then call the user's function."""
    args, kwargs = _fetch_args(args, kwargs)
    return fn(*args, **kwargs)


# ---------------------------------------------------------------- remote functions

class RemoteFunction:
    """`f.remote(*args)` runs `f` as a job of one task (on Ray, one Ray task)."""

    def __init__(self, fn: Any, options: dict):
        self._fn = fn
        self._options = options
        self._submit = task_submit_options(options)
        env_options(options)  # refuses what does not map, at decoration
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"remote function {self._fn.__name__} cannot be called directly: "
                        f"use {self._fn.__name__}.remote(...)")

    def options(self, **options: Any) -> RemoteFunction:
        return RemoteFunction(self._fn, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        args, kwargs = _lazy_args(args, kwargs)
        name = self._submit["name"] or self._fn.__name__.replace("_", "-")
        job = iris.submit(functools.partial(_call, self._fn, **kwargs), *args,
                          **{**self._submit, "name": f"{name}-{uuid.uuid4().hex[:6]}"},
                          **env_options(self._options))
        return _TaskRef(job)


# ---------------------------------------------------------------- actors

class ActorClass:
    """`C.remote(*args)` spawns C as an actor (its own job on Iris); returns its handle."""

    def __init__(self, cls: type, options: dict):
        check_known(options, ACTOR_OPTIONS, "actor class")
        if options.get("lifetime") == "detached":
            raise RefusedError("lifetime='detached': an Iris actor lives with its job; "
                               "iris.spawn it from a long-lived job instead", "lifetime")
        self._cls = cls if _is_actor(cls) else iris.actor(cls)
        self._options = options

    def options(self, **options: Any) -> ActorClass:
        return ActorClass(self._cls, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        if kwargs:
            raise RefusedError("keyword arguments to an actor's constructor: pass them "
                               "positionally (iris.spawn(cls, *args))", "kwargs")
        args, _ = _lazy_args(args, {})
        args = tuple(iris.get(a.ref) if isinstance(a, _Fetch) else a for a in args)
        name = self._options.get("name") or f"{self._cls.__name__.lower()}-" \
                                             f"{uuid.uuid4().hex[:8]}"
        name = _namespaced(name, self._options.get("namespace"))
        if self._options.get("get_if_exists"):
            try:
                return ActorHandle(iris.resolve(name, timeout=0), None)
            except _errors.ActorNotFoundError:
                pass
        ref, job = spawn_job(self._cls, *args, name=name,
                             resources=resources_of(self._options, default_cpu=0),
                             **env_options(self._options))
        return ActorHandle(ref, job)


def _is_actor(cls: type) -> bool:
    try:
        spec_of(cls)
        return True
    except TypeError:
        return False


def _namespaced(name: str, namespace: str | None) -> str:
    return f"/{namespace}/{name}" if namespace else name


class ActorHandle:
    """`handle.method.remote(*args)` calls the actor; the ref's value is the reply."""

    def __init__(self, ref: Any, job: Any):
        self._ref = ref
        self._job = job

    def __repr__(self) -> str:
        return f"ActorHandle({self._ref.name!r})"

    def __reduce__(self) -> tuple:
        return (ActorHandle, (self._ref, None))

    def __getattr__(self, method: str) -> _ActorMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _ActorMethod(self._ref, method)


class _ActorMethod:
    def __init__(self, ref: Any, method: str):
        self._ref = ref
        self._method = method

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        args, kwargs = _lazy_args(args, kwargs)
        args, kwargs = _fetch_args(args, kwargs)
        return _CallRef(getattr(self._ref, self._method)(*args, **kwargs))

    def options(self, **options: Any) -> _ActorMethod:
        raise RefusedError("actor_method.options(...): per-call options do not map; use "
                           "iris.resolve(name).method.options(timeout=s)", "options")


# ---------------------------------------------------------------- the verbs

def remote(*args: Any, **options: Any) -> Any:
    """`@ray.remote`, `@ray.remote(num_cpus=2, ...)`: functions and classes."""
    if len(args) == 1 and not options and callable(args[0]):
        return _remote(args[0], {})
    if args:
        raise TypeError("ray.remote takes a function or class, or only keyword options")
    return lambda target: _remote(target, options)


def _remote(target: Any, options: dict) -> Any:
    if isinstance(target, type):
        return ActorClass(target, options)
    if isinstance(target, types.FunctionType | functools.partial) or callable(target):
        return RemoteFunction(target, options)
    raise TypeError(f"ray.remote: expected a function or a class, got {target!r}")


def get(refs: Any, *, timeout: float | None = None) -> Any:
    """The value of a ref (a list for a list); a task's exception is raised as itself."""
    if isinstance(refs, list | tuple):
        return [get(r, timeout=timeout) for r in refs]
    if not isinstance(refs, ObjectRef):
        raise TypeError(f"ray.get: expected an ObjectRef or a list of them, got "
                        f"{type(refs).__name__}")
    return refs.result(timeout)


def wait(refs: list, *, num_returns: int = 1, timeout: float | None = None,
         fetch_local: bool = True) -> tuple[list, list]:
    """(ready, not ready): at least `num_returns` ready, unless `timeout` s pass first."""
    if not isinstance(refs, list):
        raise TypeError(f"ray.wait: expected a list of ObjectRefs, got {type(refs).__name__}")
    return iris.wait(refs, num_returns=min(num_returns, len(refs)), timeout=timeout)


def put(value: Any) -> ObjectRef:
    return _PutRef(iris.put(value))


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """The named actor's handle; ValueError if there is none (as Ray)."""
    try:
        return ActorHandle(iris.resolve(_namespaced(name, namespace), timeout=0), None)
    except _errors.ActorNotFoundError as exc:
        raise ValueError(f"Failed to look up actor with name {name!r}: {exc}") from exc


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Kill an actor this process created (its job is killed)."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"ray.kill: expected an actor handle, got {type(actor).__name__}")
    if actor._job is None:
        raise RefusedError("ray.kill of a handle from get_actor (or passed in): Iris kills an "
                           "actor through its job, which only its creator holds; kill it "
                           "there, or `iris job stop` its job", "actor")
    actor._job.kill()


def cancel(ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    if not isinstance(ref, _TaskRef):
        raise RefusedError("ray.cancel: only a task's ref can be cancelled", "ref")
    ref.job.kill()


def init(address: str | None = None, *, runtime_env: dict | None = None, **_: Any) -> None:
    """Nothing to connect: `iris.*` uses the current backend (iris.backend(...),
    IRIS_BACKEND, or an embedded local cluster on the first submit). `runtime_env`
    (env_vars, pip) applies to every remote function and actor started after it."""
    if address not in (None, "auto", "local"):
        raise RefusedError(f"ray.init(address={address!r}): choose the backend with "
                           "IRIS_BACKEND=ray://HOST:PORT (or tcp://HOST:PORT for Iris) or "
                           "`with iris.backend(...)`", "address")
    env_options({"runtime_env": runtime_env or {}})  # refuses what does not map, now
    init_env.set(dict(runtime_env or {}))


def shutdown() -> None:
    """Nothing to do: the backend's `with` block (or the process's end) closes it."""


def is_initialized() -> bool:
    return iris.backend_kind() != "none"


def _refused(name: str, instead: str) -> Any:
    def refused(*_: Any, **__: Any) -> Any:
        raise RefusedError(f"ray.{name}: not mapped by iris.compat.ray; {instead}", name)
    return refused


available_resources = _refused("available_resources", "`iris worker list --json` shows "
                                                      "what each worker offers")
cluster_resources = available_resources
get_runtime_context = _refused("get_runtime_context", "use iris.task_info() (job id, task "
                                                      "index, attempt)")
method = _refused("method", "Iris methods return one value; set deadlines with "
                            "ref.method.options(timeout=s)")


class exceptions:  # noqa: N801 - mirrors the `ray.exceptions` module
    """Ray's exception names, as the Iris errors raised in their place."""

    RayError = Exception
    RayTaskError = Exception  # the task's own exception is raised, as itself
    RayActorError = _errors.PeerUnavailableError
    ActorDiedError = _errors.ActorDiedError
    GetTimeoutError = TimeoutError
    ObjectLostError = _errors.NotFoundError
    WorkerCrashedError = _errors.JobFailedError
    TaskCancelledError = _errors.JobFailedError
