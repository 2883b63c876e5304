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
import time
import types
import uuid
from typing import Any

import iris
from iris.actors.hosting import spec_of
from iris.backends.api import spawn_job
from iris.base import errors as _errors
from iris.client.jobs import ship_by_value
from iris.compat.ray_options import (
    ACTOR_OPTIONS,
    RefusedError,
    check_known,
    check_name,
    check_strategy,
    init_env,
    job_name,
    label_of,
    resources_of,
    task_submit_options,
)
from iris.compat.ray_options import (
    runtime_env as env_options,
)
from iris.compat.ray_refs import (
    CallRef,
    FailedRef,
    ObjectRef,
    PutRef,
    TaskRef,
    call,
    fetch_args,
    lazy_args,
)

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
        label = label_of(self._fn)
        raise TypeError(f"remote function {label} cannot be called directly: "
                        f"use {label}.remote(...)")

    def options(self, **options: Any) -> RemoteFunction:
        return RemoteFunction(self._fn, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        args, kwargs = lazy_args(args, kwargs)
        _ship(self._fn)
        name = job_name(self._fn, self._submit["name"], uuid.uuid4().hex[:6])
        job = iris.submit(functools.partial(call, self._fn, **kwargs), *args,
                          **{**self._submit, "name": name}, **env_options(self._options))
        return TaskRef(job)


def _ship(fn: Any) -> None:
    """The user's code by value, as iris.submit(fn) does (here fn travels inside `call`):
    a function, a partial's function, or a callable object's class."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    ship_by_value(target if isinstance(target, types.FunctionType | type) else type(target))


# ---------------------------------------------------------------- actors

class ActorClass:
    """`C.remote(*args)` spawns C as an actor (its own job on Iris); returns its handle."""

    def __init__(self, cls: type, options: dict):
        check_known(options, ACTOR_OPTIONS, "actor class")
        check_name(options)
        check_strategy(options)
        resources_of(options, default_cpu=0)  # refuses bad resources now, not at .remote()
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
        args, _ = fetch_args(*lazy_args(args, {}))
        named = self._options.get("name")
        name = _namespaced(named, self._options.get("namespace")) if named else \
            _unnamed(f"{self._cls.__name__.lower()}-{uuid.uuid4().hex[:8]}",
                     self._options.get("namespace"))
        if named:
            try:
                existing = ActorHandle(iris.resolve(name, timeout=0), None)
            except _errors.ActorNotFoundError:
                existing = None
            if existing is not None and self._options.get("get_if_exists"):
                return existing
            if existing is not None:
                raise ValueError(self._taken(named))
        try:
            ref, job = spawn_job(self._cls, *args, name=name,
                                 resources=resources_of(self._options, default_cpu=0),
                                 **env_options(self._options))
        except _errors.ConflictError as exc:  # taken since the check above: Iris decided
            if self._options.get("get_if_exists"):
                return ActorHandle(iris.resolve(name, timeout=0), None)
            raise ValueError(self._taken(named)) from exc
        return ActorHandle(ref, job)

    def _taken(self, named: str) -> str:
        return (f"The name {named!r} (namespace={self._options.get('namespace')!r}) is "
                "already taken by a live actor; use get_if_exists=True or ray.get_actor")


def _is_actor(cls: type) -> bool:
    try:
        spec_of(cls)
        return True
    except TypeError:
        return False


def _namespaced(name: str, namespace: str | None) -> str:
    """A Ray actor name as an absolute Iris name: Ray's names are one flat space per
    namespace (the given one, else ray.init(namespace=)'s), wherever the actor is made or
    looked up (a task's relative name would live under its own job)."""
    namespace = namespace or _namespace[0]
    if name.startswith("/"):
        return name
    return f"/{namespace}/{name}" if namespace else f"/{name}"


def _unnamed(name: str, namespace: str | None) -> str:
    """An actor made without name=: its own job's, unless a namespace is given."""
    return _namespaced(name, namespace) if namespace or _namespace[0] else name


class ActorHandle:
    """`handle.method.remote(*args)` calls the actor; the ref's value is the reply."""

    def __init__(self, ref: Any, job: Any):
        self._ref = ref
        self._job = job
        self._killed = False  # by ray.kill: its calls fail here, as Ray's do

    def __repr__(self) -> str:
        return f"ActorHandle({self._ref.name!r})"

    def __reduce__(self) -> tuple:
        return (ActorHandle, (self._ref, None))

    def __getattr__(self, method: str) -> _ActorMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _ActorMethod(self, method)


class _ActorMethod:
    def __init__(self, handle: ActorHandle, method: str):
        self._handle = handle
        self._ref = handle._ref
        self._method = method

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        if self._handle._killed:
            return FailedRef(_errors.ActorDiedError(
                f"actor {self._ref.name!r} was killed (ray.kill); {self._method!r} was not "
                "run", actor=self._ref.name, method=self._method))
        args, kwargs = lazy_args(args, kwargs)
        args, kwargs = fetch_args(args, kwargs)
        return CallRef(getattr(self._ref, self._method)(*args, **kwargs), self._ref.name,
                       self._method)

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
    """The value of a ref (a list for a list); a task's exception is raised as itself.
    `timeout` bounds the whole call, not each ref of a list (TimeoutError, which
    `ray.exceptions.GetTimeoutError` is)."""
    _check_timeout("ray.get", timeout)
    if isinstance(refs, ObjectRef):
        return refs.result(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    return _get(refs, deadline)


def _get(refs: Any, deadline: float | None) -> Any:
    if isinstance(refs, list | tuple):
        return [_get(r, deadline) for r in refs]
    if not isinstance(refs, ObjectRef):
        raise TypeError(f"ray.get: expected an ObjectRef or a list of them, got "
                        f"{type(refs).__name__}")
    return refs.result(None if deadline is None else max(deadline - time.monotonic(), 0))


def _check_timeout(verb: str, timeout: Any) -> None:
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or timeout < 0):
        raise ValueError(f"{verb}: timeout must be None or a number of seconds >= 0, got "
                         f"{timeout!r}")


def wait(refs: list, *, num_returns: int = 1, timeout: float | None = None,
         fetch_local: bool = True) -> tuple[list, list]:
    """(ready, not ready): at least `num_returns` ready, unless `timeout` s pass first.
    `fetch_local` is accepted and ignored (values are fetched by ray.get)."""
    if not isinstance(refs, list):
        raise TypeError(f"ray.wait: expected a list of ObjectRefs, got {type(refs).__name__}")
    for ref in refs:
        if not isinstance(ref, ObjectRef):
            raise TypeError(f"ray.wait: expected a list of ObjectRefs, got a "
                            f"{type(ref).__name__} in it")
    if isinstance(num_returns, bool) or not isinstance(num_returns, int) or num_returns < 0:
        raise ValueError(f"ray.wait: num_returns must be an int >= 0, got {num_returns!r}")
    _check_timeout("ray.wait", timeout)
    return iris.wait(refs, num_returns=min(num_returns, len(refs)), timeout=timeout)


def put(value: Any) -> ObjectRef:
    """Keep `value` where every task can `ray.get` it (`iris.put`)."""
    if isinstance(value, ObjectRef):
        raise TypeError("Calling 'put' on an ObjectRef is not allowed (as on Ray): pass the "
                        "ref itself, or ray.put(ray.get(ref))")
    return PutRef(iris.put(value))


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
    actor._killed = True  # as on Ray, a call made after kill() fails


def cancel(ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    if not isinstance(ref, TaskRef):
        raise RefusedError("ray.cancel: only a task's ref can be cancelled; an actor call "
                           "cannot be: give it a deadline (iris.resolve(name).method"
                           ".options(timeout=s)) or ray.kill the actor", "ref")
    ref.job.kill()


def init(address: str | None = None, *, runtime_env: dict | None = None,
         namespace: str | None = None, **_: Any) -> None:
    """Nothing to connect: `iris.*` uses the current backend (iris.backend(...),
    IRIS_BACKEND, or an embedded local cluster on the first submit). `runtime_env`
    (env_vars, pip) applies to every remote function and actor started after it;
    `namespace` to every named actor made or looked up without one. Other options
    (num_cpus, ignore_reinit_error, log_to_driver, ...) are accepted and ignored."""
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise ValueError(f"ray.init: namespace must be a non-empty string, got {namespace!r}")
    if address not in (None, "auto", "local"):
        raise RefusedError(f"ray.init(address={address!r}): choose the backend with "
                           "IRIS_BACKEND=ray://HOST:PORT (or tcp://HOST:PORT for Iris) or "
                           "`with iris.backend(...)`", "address")
    env_options({"runtime_env": runtime_env or {}})  # refuses what does not map, now
    init_env.set(dict(runtime_env or {}))
    _namespace[0] = namespace
    _initialized[0] = True


def shutdown() -> None:
    """Forget init()'s runtime_env; the backend itself is closed by its `with` block (or
    the process's end). A later init() starts over, as on Ray."""
    init_env.set(None)
    _namespace[0] = None
    _initialized[0] = False


# None until init() or shutdown() is called: then whether a backend is current (Ray's
# calls work before init(), which they start themselves).
_initialized: list[bool | None] = [None]
_namespace: list[str | None] = [None]  # ray.init(namespace=...), for the whole process


def is_initialized() -> bool:
    """True after init() until shutdown(); before either, whether a backend is current."""
    if _initialized[0] is None:
        return iris.backend_kind() != "none"
    return _initialized[0]


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
    ActorUnavailableError = _errors.PeerUnavailableError
    ActorDiedError = _errors.ActorDiedError
    GetTimeoutError = TimeoutError
    ObjectLostError = _errors.NotFoundError
    WorkerCrashedError = _errors.JobFailedError
    TaskCancelledError = _errors.JobFailedError


def __getattr__(name: str) -> Any:
    """Any other `ray.X`: an AttributeError that says it is not mapped (not a bare one)."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"ray.{name} is not mapped by iris.compat.ray; "
                         "docs/migrating-from-ray.md lists what is and what to use instead")
