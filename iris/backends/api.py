"""The neutral public calls, `iris.submit` ... `iris.map`, sent to whichever backend is current.

Not any backend's logic. Every call checks its arguments here, the same for all backends
(a bad argument or an unpicklable one is refused before anything is submitted), then asks
the current context (backends/select.py) to act. With no context, submit, spawn and map
start an embedded local Iris cluster, as Iris always has; the rest say there is no cluster.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from iris.actors import ActorFuture, ActorGroup, ActorRef, ClusterContext
from iris.backends import mapping, select
from iris.backends.common import ObjectRef
from iris.backends.iris.backend import IrisBackend
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import InvalidRequestError, IrisError
from iris.base.resources import Resources
from iris.client import checks
from iris.client import jobs as client_jobs


def _adapt(ctx: Any) -> Any:
    return IrisBackend(ctx) if isinstance(ctx, ClusterContext) else ctx


def current_backend() -> Any:
    """The backend `iris.*` calls use here, or IrisError when there is none."""
    ctx = select.peek()
    if ctx is None:
        raise IrisError("no Iris cluster here: use `with iris.local_cluster():`, "
                        "iris.connect(), `with iris.backend('inprocess'):` or set IRIS_BACKEND")
    return _adapt(ctx)


def _backend_or_local() -> Any:
    """The current backend; with none, an embedded local cluster (started once)."""
    ctx = select.peek()
    return _adapt(ctx if ctx is not None else client_jobs.context_or_local_cluster())


def backend_kind() -> str:
    """"inprocess", "iris" or "ray": what runs `iris.*` here ("none" if nothing does)."""
    ctx = select.peek()
    return "none" if ctx is None else _adapt(ctx).kind


# ---------------------------------------------------------------- jobs and actors

def submit(entry: Callable | Sequence[str], *args: Any, name: str | None = None,
           resources: Resources | None = None, replicas: int = 1, priority: str | None = None,
           env: dict[str, str] | None = None, pip: Sequence[str] = (),
           constraints: dict | None = None, max_retries_failure: int | None = None,
           max_retries_preemption: int | None = None, max_task_failures: int | None = None,
           timeout: float | None = None, scheduling_timeout: float | None = None,
           request_id: str | None = None, **iris_options: Any) -> Any:
    """Run `entry(*args)` (or the command `entry`) as a job on the current backend; its
    handle (`wait`, `status`, `result`, `kill`, `done`, `logs`). Options only an Iris
    cluster has (workspace, durable, dry_run, colocate, ...) pass through to it."""
    checks.entry(entry)
    checks.submit_options(
        name=name, resources=resources, replicas=replicas, priority=priority, env=env, pip=pip,
        constraints=constraints, request_id=request_id,
        retries={"max_retries_failure": max_retries_failure,
                 "max_retries_preemption": max_retries_preemption,
                 "max_task_failures": max_task_failures},
        timeouts={"timeout": timeout, "scheduling_timeout": scheduling_timeout,
                  **{k: iris_options[k] for k in ("checkpoint_every", "durable_timeout")
                     if k in iris_options}})
    for flag in ("durable", "existing_capacity_only", "dry_run"):
        if flag in iris_options and not isinstance(iris_options[flag], bool):
            raise checks.invalid(flag, "True or False", iris_options[flag])
    if callable(entry):
        # The user's own module travels by value (a script or test module is not importable
        # where the task runs); then the one check that the call can be pickled at all.
        client_jobs.ship_by_value(entry.func if isinstance(entry, functools.partial)
                                  else entry)
        checks.check_args_picklable(entry, args)
    backend = _backend_or_local()
    options = dict(name=name, resources=resources, replicas=replicas, priority=priority,
                   env=env, pip=pip, constraints=constraints,
                   max_retries_failure=max_retries_failure,
                   max_retries_preemption=max_retries_preemption,
                   max_task_failures=max_task_failures, timeout=timeout,
                   scheduling_timeout=scheduling_timeout, request_id=request_id)
    if iris_options and backend.kind != "iris":
        raise InvalidRequestError(f"{', '.join(sorted(iris_options))}: only an Iris cluster "
                                  f"has this option; the {backend.kind} backend does not",
                                  sorted(iris_options)[0])
    return backend.submit(entry, *args, **options, **iris_options)


def spawn(cls: type, *args: Any, name: str, resources: Resources | None = None,
          replicas: int = 1, timeout: float = 120.0, **options: Any) -> ActorRef | ActorGroup:
    """Run `cls(*args)` as `name` (`replicas` of it) on the current backend; its ref (an
    ActorGroup when replicas > 1)."""
    return spawn_job(cls, *args, name=name, resources=resources, replicas=replicas,
                     timeout=timeout, **options)[0]


def spawn_job(cls: type, *args: Any, name: str, resources: Resources | None = None,
              replicas: int = 1, timeout: float = 120.0, **options: Any) -> tuple[Any, Any]:
    """As spawn, with the job that serves the actor (kill it to stop the actor)."""
    from iris.actors.hosting import spec_of

    checks.actor_class(cls, spec_of)
    checks.name(name)
    checks.submit_options(name=name, resources=resources, replicas=replicas, priority=None,
                          env=None, pip=(), constraints=None, request_id=None, retries={},
                          timeouts={"timeout": timeout})
    checks.check_picklable({f"args[{i}]": a for i, a in enumerate(args)})
    return _backend_or_local().spawn(cls, *args, name=name, resources=resources,
                                     replicas=replicas, timeout=timeout, **options)


def resolve(name: str, timeout: float = 30.0) -> ActorRef:
    """A ref to the actor registered as `name`, waiting up to `timeout` s for it."""
    return current_backend().resolve(checks.name(name), checks.wait_s(timeout))


def resolve_all(name: str, timeout: float = 0.0) -> ActorGroup:
    """Every live replica registered as `name`."""
    return current_backend().resolve_all(checks.name(name), checks.wait_s(timeout))


def list_actors(prefix: str = "/") -> list[dict]:
    return current_backend().list_actors(prefix)


# ---------------------------------------------------------------- map

def map(fn: Callable, inputs: Iterable, *, resources: Resources | None = None,  # noqa: A001
        max_parallel: int | None = None, retries: int = 3, name: str | None = None,
        cancel_on_failure: bool = True, return_exceptions: bool = False,
        progress: bool | None = None, env: dict[str, str] | None = None,
        pip: Sequence[str] = ()) -> list:
    """`[fn(x) for x in inputs]`, run on the current backend; results in input order.

    On Iris: one job of up to `max_parallel` tasks (each with `resources`) pulling chunks
    of items; on Ray: one task per item; in process: a pool of threads. An item whose
    worker dies is tried again up to `retries` times (WorkerLostError after). The first
    item that raises stops the map: the rest are cancelled and its exception is raised as
    itself, with `map_index`, a note naming the input, and `remote_traceback`. With
    `cancel_on_failure=False` every item runs and the first failure is raised at the end;
    with `return_exceptions=True` exceptions take their item's place in the list.
    `progress`: a bar on stderr (default: only when stderr is a terminal). `env` and `pip`
    are the map job's, as for iris.submit.
    """
    results = dict(_stream(fn, inputs, resources, max_parallel, retries, name, True,
                           cancel_on_failure, return_exceptions, progress, env, pip))
    return [results[i] for i in range(len(results))]


def map_unordered(fn: Callable, inputs: Iterable, *, resources: Resources | None = None,
                  max_parallel: int | None = None, retries: int = 3, name: str | None = None,
                  cancel_on_failure: bool = True, return_exceptions: bool = False,
                  progress: bool | None = None, env: dict[str, str] | None = None,
                  pip: Sequence[str] = ()) -> Iterator[tuple[int, Any]]:
    """As map, but yields `(index, result)` as each item finishes. Closing the iterator
    (or leaving a for loop early) cancels what is left."""
    return _stream(fn, inputs, resources, max_parallel, retries, name, False,
                   cancel_on_failure, return_exceptions, progress, env, pip)


def _stream(fn: Callable, inputs: Iterable, resources: Any, max_parallel: Any, retries: Any,
            name: Any, ordered: bool, cancel_on_failure: bool, return_exceptions: bool,
            progress: bool | None, env: Any = None, pip: Any = ()) -> Iterator[tuple[int, Any]]:
    items = mapping.check(fn, inputs, resources, max_parallel, retries)
    if name is not None:
        checks.name(name, "name")
    checks.submit_options(name=None, resources=None, replicas=1, priority=None, env=env,
                          pip=pip, constraints=None, retries={}, timeouts={}, request_id=None)
    if not items:
        return iter(())
    client_jobs.ship_by_value(fn)
    backend = _backend_or_local()
    label = name or "map-" + (getattr(fn, "__name__", "fn").strip("<>").replace("_", "-"))
    opts = mapping.MapOptions(resources or Resources(), max_parallel, retries, label,
                              dict(env) if env else None, tuple(pip))
    return mapping.run(backend.map_stream(fn, items, opts), len(items), ordered=ordered,
                       cancel_on_failure=cancel_on_failure,
                       return_exceptions=return_exceptions, progress=progress)


# ---------------------------------------------------------------- objects

def put(value: Any) -> ObjectRef:
    """Keep `value` where every task and client of this backend can `iris.get` it."""
    return current_backend().put(value)


def get(item: Any, timeout: float | None = None) -> Any:
    """The value behind `item`: an ObjectRef, an ActorFuture, a job (its result), or a
    list of these (a list back)."""
    if isinstance(item, list | tuple):
        return [get(x, timeout) for x in item]
    if isinstance(item, ObjectRef):
        backend = current_backend()
        if backend.kind != item.backend:
            raise InvalidRequestError(f"{item!r} was put on the {item.backend} backend; the "
                                      f"current one is {backend.kind}", "ref")
        return backend.get_object(item, timeout)
    if isinstance(item, ActorFuture) or hasattr(item, "result"):
        return item.result(timeout)
    raise InvalidRequestError(f"iris.get: expected an ObjectRef, an ActorFuture or a job, got "
                              f"{type(item).__name__}", "item")


def free(ref: ObjectRef) -> None:
    """Drop an object put with iris.put (later gets raise NotFoundError)."""
    if not isinstance(ref, ObjectRef):  # it failed as "'str' object has no attribute 'owner'"
        raise InvalidRequestError(f"iris.free: expected an ObjectRef (from iris.put), got "
                                  f"{type(ref).__name__}", "ref")
    current_backend().free(ref)


def _done(item: Any, left: float | None) -> bool:
    """`item.done()`; an Iris job's asks its controller only until the wait's deadline (one
    that could not be reached once took a 2 s wait 59 s, then raised PeerUnavailableError)."""
    if left is not None and isinstance(item, client_jobs.JobHandle):
        return item.done(timeout=left)
    return item.done()


def wait(items: Sequence[Any], *, num_returns: int | None = None,
         timeout: float | None = None) -> tuple[list, list]:
    """Wait until `num_returns` of `items` (jobs or futures; default: all) are done, or
    `timeout` s pass: (done, pending), each in the order given."""
    items = list(items)
    want = len(items) if num_returns is None else num_returns
    if isinstance(want, bool) or not isinstance(want, int) or not 0 <= want <= len(items):
        raise InvalidRequestError(f"num_returns: expected an int from 0 to {len(items)}, got "
                                  f"{num_returns!r}", "num_returns")
    for item in items:
        if not callable(getattr(item, "done", None)):
            raise InvalidRequestError(f"iris.wait: {type(item).__name__} has no done(); "
                                      "expected jobs or futures", "items")
    clock = SYSTEM_CLOCK
    deadline = None if timeout is None else clock.monotonic() + timeout
    finished: set[int] = set()
    woken = threading.Event()  # set by any item that can call back when done
    polled = [x for x in items if not callable(getattr(x, "add_done_callback", None))]
    for item in items:
        if callable(getattr(item, "add_done_callback", None)):
            item.add_done_callback(lambda _: woken.set())
    pause = 0.001
    while True:
        woken.clear()
        left = None if deadline is None else max(deadline - clock.monotonic(), 0)
        try:
            finished.update(i for i, item in enumerate(items)
                            if i not in finished and _done(item, left))
        except TimeoutError:  # a job's controller unreachable until the deadline: pending
            break
        if len(finished) >= want or (deadline is not None and clock.monotonic() >= deadline):
            break
        left = None if deadline is None else max(deadline - clock.monotonic(), 0)
        # Jobs of Iris and Ray cannot call back: ask them again after a pause that grows
        # to 250 ms (each done() is a call to the controller); futures wake us at once.
        step = pause if polled else left
        woken.wait(step if left is None else min(step if step is not None else left, left))
        pause = min(pause * 2, 0.25)
    chosen = set(sorted(finished)[:want]) if len(finished) >= want else finished
    return ([x for i, x in enumerate(items) if i in chosen],
            [x for i, x in enumerate(items) if i not in chosen])
