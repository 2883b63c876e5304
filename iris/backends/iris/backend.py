"""The Iris backend: the neutral calls (submit, spawn, map, put/get) on a ClusterContext.

Not the client itself (iris.client keeps submit, JobHandle, local_cluster, connect); this
adapts it to the interface every backend offers, and adds what only the neutral API has:
`map` as one job of pulling workers (map_job.py) and objects served from the putting
process (ObjectHolder below; a get from another process is one actor call whose big
buffers travel as frames, through shared memory on the same host).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from queue import Empty, SimpleQueue
from typing import Any

from iris.actors import ActorRef, ClusterContext, actor
from iris.backends import common
from iris.backends.iris.map_job import MapCoordinator, map_worker
from iris.backends.mapping import MapOptions
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import ActorNotFoundError, NotFoundError, PeerUnavailableError
from iris.client import jobs as client_jobs
from iris.client.retry import call_controller
from iris.wire.states import TERMINAL_TASK

# How often a running map asks the controller about its tasks (to find dead ones).
_WATCH_S = 1.0
# Without max_parallel, a map runs at most this many tasks when the workers' CPUs cannot
# be read: a modest pool that a small cluster can hold.
_DEFAULT_TASKS = 8
_TERMINAL_TASK = frozenset(s.value for s in TERMINAL_TASK)


@actor
class ObjectHolder:
    """Objects this process put, served to the cluster until freed or the process ends."""

    def __init__(self, store: dict):
        self._store = store

    def get(self, oid: str) -> Any:
        if oid not in self._store:
            raise NotFoundError(f"object {oid[:12]}: freed, or never put here")
        return self._store[oid]

    def free(self, oid: str) -> None:
        self._store.pop(oid, None)


class IrisBackend:
    """The neutral interface on one ClusterContext (made per call; state lives on ctx)."""

    kind = "iris"

    def __init__(self, ctx: ClusterContext):
        self.ctx = ctx

    def __getattr__(self, name: str) -> Any:  # resolve, resolve_all, serve, full_name...
        return getattr(self.ctx, name)

    # ------------------------------------------------------------ jobs and actors

    def submit(self, entry: Any, *args: Any, **options: Any) -> client_jobs.JobHandle:
        return client_jobs.submit(entry, *args, **options)

    def spawn(self, cls: type, *args: Any, **options: Any) -> tuple:
        return client_jobs.spawn_job(cls, *args, **options)

    # ------------------------------------------------------------ map

    def map_stream(self, fn: Callable, items: list, opts: MapOptions) -> Iterator[tuple]:
        tasks = max(1, min(opts.max_parallel or self._slots(opts), len(items)))
        out: SimpleQueue = SimpleQueue()
        name = f"/iris-internal/map/{uuid.uuid4().hex[:12]}"
        ref = self.ctx.serve(MapCoordinator, name, items, opts.retries, tasks, out)
        job = None
        try:
            job = client_jobs.submit(
                map_worker, ref, fn, name=f"{opts.name}-{uuid.uuid4().hex[:6]}", replicas=tasks, resources=opts.resources,
                max_retries_failure=opts.retries, max_task_failures=tasks, env=opts.env,
                pip=opts.pip)
            yield from self._drain(job, ref, out, len(items))
        finally:
            try:
                ref.cancel().result(timeout=10)
            except Exception:  # the coordinator is ours and local; stopping it below anyway
                pass
            if job is not None and not job.done():
                job.kill()
            self.ctx.unserve(name)

    def _drain(self, job: client_jobs.JobHandle, ref: ActorRef, out: SimpleQueue,
               total: int) -> Iterator[tuple]:
        clock = SYSTEM_CLOCK
        seen_ended: set[int] = set()
        next_watch = clock.monotonic() + _WATCH_S
        for _ in range(total):
            while True:
                if clock.monotonic() >= next_watch:
                    self._watch(job, ref, seen_ended)
                    next_watch = clock.monotonic() + _WATCH_S
                try:
                    index, ok, value, tb = out.get(timeout=_WATCH_S)
                    break
                except Empty:
                    continue
            if not ok and tb:
                value = common.with_remote_traceback(value, tb, f"iris.map input {index} on "
                                                                f"{job.job_id}")
            yield index, ok, value

    @staticmethod
    def _watch(job: client_jobs.JobHandle, ref: ActorRef, seen_ended: set[int]) -> None:
        """Tell the coordinator of tasks gone for good, so their items run elsewhere."""
        for task in job.status().get("tasks", []):
            if task["state"] in _TERMINAL_TASK and task["index"] not in seen_ended:
                seen_ended.add(task["index"])
                ref.task_ended(task["index"]).result(timeout=30)

    def _slots(self, opts: MapOptions) -> int:
        """How many tasks of `opts.resources` the workers' CPUs hold now (a default)."""
        try:
            workers = call_controller(self.ctx.node, self.ctx.address, "list_workers",
                                      timeout_s=10.0)
        except Exception:
            return _DEFAULT_TASKS
        cpu = opts.resources.cpu or 1.0
        slots = sum(int(w.get("cpu", 0) // cpu) for w in workers)
        return max(1, slots or _DEFAULT_TASKS)

    # ------------------------------------------------------------ objects

    def _holder(self) -> tuple[dict, ActorRef]:
        """This process's object store and the ref that serves it (made on first put)."""
        ctx = self.ctx
        lock = ctx.__dict__.setdefault("_iris_objects_lock", threading.Lock())
        with lock:
            held = ctx.__dict__.get("_iris_objects")
            if held is None:
                store: dict = {}
                name = f"/iris-internal/objects/{ctx.node.id}"
                held = ctx.__dict__["_iris_objects"] = (store, ctx.serve(ObjectHolder, name,
                                                                         store))
            return held

    def put(self, value: Any) -> common.ObjectRef:
        common.check_puttable(value)
        store, holder = self._holder()
        oid = common.new_oid()
        store[oid] = value
        return common.ObjectRef(oid, self.kind, holder)

    def get_object(self, ref: common.ObjectRef, timeout: float | None = None) -> Any:
        held = self.ctx.__dict__.get("_iris_objects")
        if held is not None and ref.owner == held[1]:
            if ref.oid not in held[0]:
                raise NotFoundError(f"{ref!r}: freed, or never put here")
            return held[0][ref.oid]
        try:
            return ref.owner.get(ref.oid).result(timeout)
        except (PeerUnavailableError, ActorNotFoundError) as exc:
            raise NotFoundError(f"{ref!r}: the process that put it ({ref.owner.name}) is "
                                f"gone, and the object with it ({type(exc).__name__})") from exc

    def free(self, ref: common.ObjectRef) -> None:
        held = self.ctx.__dict__.get("_iris_objects")
        if held is not None and ref.owner == held[1]:
            held[0].pop(ref.oid, None)
        else:
            ref.owner.free(ref.oid).result(30)
