"""The in-process backend: jobs as threads, actors as threads, a dict for objects and names.

Not a cluster: no sockets, no controller, no worker processes (unless isolation is asked
for: `inprocess+process` runs each task's callable in a child process, and a task with its
own `env` or a command always runs in one). Deterministic where it can be: a map with
`max_parallel=1` runs in input order on one thread. Names follow Iris: a relative name lives
in the caller's namespace (a job's tasks share `/<user>/<job>`, a client outside any job has
`/`) and is looked up there, then in each enclosing namespace.

`close()` (the end of `with iris.backend("inprocess")`) stops every actor and kills every
job; a thread task still running its function is waited for up to 5 s.
"""

from __future__ import annotations

import contextvars
import getpass
import itertools
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

from iris.actors.current import current_context
from iris.actors.refs import ActorGroup, ActorRef
from iris.backends import common
from iris.backends.inprocess import mapping
from iris.backends.inprocess.actors import LocalActor, LocalActorRef
from iris.backends.inprocess.jobs import LocalJob, command_task, run_in_child
from iris.backends.mapping import MapOptions
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import (
    ActorNotFoundError,
    ConflictError,
    IrisError,
    NotFoundError,
    RemoteError,
)
from iris.base.ids import join_path, parent_path

_log = logging.getLogger(__name__)
_JOIN_S = 5.0  # close(): how long thread tasks still running get to return


class _Shared:
    """What every view of one in-process backend shares (one lock guards it all)."""

    def __init__(self, isolation: str):
        self.isolation = isolation
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # a name was registered
        self.names: dict[str, LocalActor] = {}
        self.objects: dict[str, Any] = {}
        self.jobs: list[LocalJob] = []
        self.actors: list[LocalActor] = []
        self.seq = itertools.count(1)
        self.loop: Any = None
        self.loop_thread: threading.Thread | None = None
        self.closed = False
        self.warned_pip = False


class InProcessBackend:
    """`iris.*` in this process. Views made for a job's tasks share the same state but
    have the job's namespace."""

    kind = "inprocess"

    def __init__(self, isolation: str = "thread", *, _shared: _Shared | None = None,
                 namespace: str = "/"):
        if isolation not in ("thread", "process"):
            raise IrisError(f"isolation: expected 'thread' or 'process', got {isolation!r}")
        self._shared = _shared or _Shared(isolation)
        self.namespace = namespace
        self.address = "inprocess"

    def __repr__(self) -> str:
        return f"InProcessBackend(namespace={self.namespace!r})"

    def _view(self, namespace: str) -> InProcessBackend:
        return InProcessBackend(_shared=self._shared, namespace=namespace)

    def _context_for(self, namespace: str) -> contextvars.Context:
        """A Context in which this backend (at `namespace`) is current: for threads."""
        ctx = contextvars.copy_context()
        ctx.run(current_context.set, self._view(namespace))
        return ctx

    # ------------------------------------------------------------ names

    def full_name(self, name: str) -> str:
        return join_path(self.namespace, name)

    def scope(self, name: str) -> list[str]:
        if name.startswith("/"):
            return [join_path("/", name)]
        names, namespace = [], self.namespace or "/"
        while True:
            names.append(join_path(namespace, name))
            if namespace == "/":
                return names
            namespace = parent_path(namespace)

    def serve(self, cls: type, name: str, *args: Any, **kwargs: Any) -> ActorRef:
        """Host `cls(*args, **kwargs)` here and register it as `name`."""
        return self._host(cls, self.full_name(name), args, kwargs, self.namespace)

    def _host(self, cls: type, full: str, args: tuple, kwargs: dict,
              namespace: str) -> LocalActorRef:
        shared = self._shared
        with shared.lock:
            if full in shared.names and shared.names[full].alive:
                raise ConflictError(f"{full}: an actor is already registered under this name "
                                    "(in process)")
        actor = LocalActor(full, cls, args, kwargs, self._context_for(namespace), self._loop,
                           self._forget)
        actor.start()
        with shared.changed:
            shared.names[full] = actor
            shared.actors.append(actor)
            shared.changed.notify_all()
        return LocalActorRef(actor)

    def _forget(self, name: str, actor: LocalActor) -> None:
        with self._shared.lock:
            if self._shared.names.get(name) is actor:
                del self._shared.names[name]

    def unserve(self, name: str) -> None:
        with self._shared.lock:
            actor = self._shared.names.pop(self.full_name(name), None)
        if actor is not None:
            actor.stop()

    def resolve(self, name: str, timeout: float = 30.0) -> ActorRef:
        found = self._lookup(name, timeout)
        if not found:
            tried = " or ".join(repr(n) for n in self.scope(name))
            raise ActorNotFoundError(f"no actor registered as {tried} after waiting {timeout} "
                                     "s (in process)", actor=name)
        return LocalActorRef(found[0])

    def resolve_all(self, name: str, timeout: float = 0.0) -> ActorGroup:
        found = self._lookup(name, timeout)
        full = found[0].name if found else self.full_name(name)
        return ActorGroup(full, [LocalActorRef(a) for a in found])

    def _lookup(self, name: str, timeout: float) -> list[LocalActor]:
        """Actors under the first name in scope that has any: `name`, or its replicas
        `name/0`, `name/1`, ... (how spawn registers a group)."""
        deadline = SYSTEM_CLOCK.monotonic() + timeout
        with self._shared.changed:
            while True:
                for full in self.scope(name):
                    found = self._members(full)
                    if found:
                        return found
                left = deadline - SYSTEM_CLOCK.monotonic()
                if left <= 0:
                    return []
                self._shared.changed.wait(left)

    def _members(self, full: str) -> list[LocalActor]:
        names = self._shared.names
        if full in names:
            return [names[full]]
        replicas = sorted((k for k in names if k.startswith(full + "/#")),
                          key=lambda k: int(k.rsplit("#", 1)[1]))
        return [names[k] for k in replicas]

    def list_actors(self, prefix: str = "/") -> list[dict]:
        with self._shared.lock:
            return [{"name": n, "address": "inprocess", "owner": "inprocess"}
                    for n in sorted(self._shared.names) if n.startswith(prefix)]

    # ------------------------------------------------------------ jobs

    def submit(self, entry: Callable | list[str], *args: Any, name: str | None = None,
               replicas: int = 1, env: dict[str, str] | None = None, pip: Any = (),
               max_retries_failure: int | None = None, timeout: float | None = None,
               **_: Any) -> LocalJob:
        """Run `entry` as a job of `replicas` tasks, now. (Resources, priority and the
        other placement options are checked by the caller and have nothing to do here.)"""
        shared = self._shared
        if pip and not shared.warned_pip:
            shared.warned_pip = True
            print(f"iris: in process, pip={list(pip)!r} is not installed: tasks use this "
                  "interpreter's packages", file=sys.stderr)
        label = name or getattr(entry, "__name__", "job").strip("<>").replace("_", "-")
        job_id = f"/{_user()}/{label}-{next(shared.seq)}"
        namespace = "/" + "/".join(job_id.strip("/").split("/")[:2])
        job = LocalJob(job_id, replicas, max_retries_failure or 0, timeout)
        body = self._task_body(entry, args, env, job_id)
        with shared.lock:
            if shared.closed:
                raise IrisError("this in-process backend is closed")
            shared.jobs.append(job)
        common.adopt(job)
        job.start(body, self._context_for(namespace))
        return job

    def _task_body(self, entry: Any, args: tuple, env: dict | None, job_id: str) -> Callable:
        if not callable(entry):
            return lambda task: command_task(list(entry), self._child_env(env, job_id, task),
                                             task)
        payload = common.check_args_picklable(entry, args)
        if env or self._shared.isolation == "process":
            return lambda task: run_in_child(payload, self._child_env(env, job_id, task), task)

        def body(task: Any) -> Any:
            fn, fargs, kwargs = cloudpickle.loads(payload)  # a copy, as over the wire
            try:
                value = fn(*fargs, **kwargs)
            except Exception as exc:
                sent = _raised_over_the_wire(exc)
                if sent is exc:
                    raise
                raise sent from None
            return _as_over_the_wire(value)

        return body

    def _child_env(self, env: dict | None, job_id: str, task: Any) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if k not in ("IRIS_ADDRESS",)}
        return {**base, **(env or {}), "IRIS_BACKEND": "inprocess", "IRIS_JOB_ID": job_id,
                "IRIS_TASK_INDEX": str(task.index), "IRIS_NUM_TASKS": str(task.num_tasks)}

    def spawn(self, cls: type, *args: Any, name: str, replicas: int = 1,
              **_: Any) -> tuple[ActorRef | ActorGroup, LocalJob]:
        """Serve `replicas` instances as `name` (a group registers `name/#0`, `name/#1`...):
        their refs and a job standing for them (kill it to stop them)."""
        full = self.full_name(name)
        job = LocalJob(f"/{_user()}/{name.strip('/').replace('/', '-')}-"
                       f"{next(self._shared.seq)}", replicas, 0, None)
        refs = []
        for i in range(replicas):
            member = full if replicas == 1 else f"{full}/#{i}"
            refs.append(self._host(cls, member, args, {}, self.namespace))
        actors = [r._actor for r in refs]
        job.add_done_callback(lambda _: [a.stop(wait=False) for a in actors])
        with self._shared.lock:
            self._shared.jobs.append(job)
        common.adopt(job)
        return (refs[0] if replicas == 1 else ActorGroup(full, refs)), job

    # ------------------------------------------------------------ map

    def map_stream(self, fn: Callable, items: list, opts: MapOptions) -> Iterator[tuple]:
        if self._shared.isolation == "process":
            return mapping.process_stream(fn, items, opts)
        copies = cloudpickle.loads(cloudpickle.dumps(items))  # as over the wire
        return mapping.thread_stream(fn, copies, opts, self._context_for(self.namespace))

    # ------------------------------------------------------------ objects

    def put(self, value: Any) -> common.ObjectRef:
        common.check_puttable(value)
        oid = common.new_oid()
        with self._shared.lock:
            self._shared.objects[oid] = value
        return common.ObjectRef(oid, self.kind)

    def get_object(self, ref: common.ObjectRef, timeout: float | None = None) -> Any:
        with self._shared.lock:
            if ref.oid not in self._shared.objects:
                raise NotFoundError(f"{ref!r}: no such object here (freed, or put by "
                                    "another backend)")
            return self._shared.objects[ref.oid]

    def free(self, ref: common.ObjectRef) -> None:
        with self._shared.lock:
            self._shared.objects.pop(ref.oid, None)

    # ------------------------------------------------------------ lifecycle

    def _loop(self) -> Any:
        """The event loop async actor methods run on (one thread, started on first use)."""
        shared = self._shared
        with shared.lock:
            if shared.loop is None:
                import asyncio

                shared.loop = asyncio.new_event_loop()
                shared.loop_thread = threading.Thread(target=shared.loop.run_forever,
                                                      daemon=True, name="iris-inprocess-loop")
                shared.loop_thread.start()
            return shared.loop

    def close(self) -> None:
        shared = self._shared
        with shared.lock:
            if shared.closed:
                return
            shared.closed = True
            jobs, actors = list(shared.jobs), list(shared.actors)
            shared.names.clear()
            shared.objects.clear()
        for job in jobs:
            job.kill()
        for actor in actors:
            actor.stop()
        for job in jobs:
            job.join_threads(_JOIN_S)
        if shared.loop is not None:  # async calls still running are cancelled, not dropped
            import asyncio

            asyncio.run_coroutine_threadsafe(_cancel_tasks(), shared.loop).result(timeout=10)
            shared.loop.call_soon_threadsafe(shared.loop.stop)
            shared.loop_thread.join(timeout=10)
            shared.loop.close()

    def __enter__(self) -> InProcessBackend:
        self._token = current_context.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        current_context.reset(self._token)
        self.close()


async def _cancel_tasks() -> None:
    """On the loop: cancel every other task and let each see its CancelledError."""
    import asyncio

    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _as_over_the_wire(value: Any) -> Any:
    """A task's result, which a cluster pickles to its caller: one that cannot be pickled
    fails the task here too, saying why (a copy is not made: results are the task's)."""
    try:
        cloudpickle.dumps(value)
    except Exception as exc:
        raise RuntimeError(f"the task's return value could not be pickled: "
                           f"{type(exc).__name__}: {exc}") from None
    return value


def _raised_over_the_wire(exc: Exception) -> Exception:
    """A task's exception as a cluster's caller gets it: itself if it travels as a pickle,
    else a RemoteError naming its type, with its traceback (task_runtime.py does the same)."""
    try:
        cloudpickle.loads(cloudpickle.dumps(exc))
    except Exception as why:
        kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return RemoteError.unpicklable(kind, str(exc), f"{type(why).__name__}: {why}",
                                       common.format_exc(exc))
    return exc


def _user() -> str:
    return os.environ.get("IRIS_USER") or getpass.getuser()
