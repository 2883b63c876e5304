"""What runs inside Ray workers for the Ray backend, and Ray's errors as Iris's.

Not the backend (backend.py). Every task and actor method the backend sends is wrapped so
that, in the Ray worker, `iris.*` uses the Ray backend at the job's namespace (tasks
inherit their backend) and `iris.task_info()` tells the task where it stands. Ray wraps a
task's exception in RayTaskError; the caller gets the task's own exception back (its type,
`remote_traceback`), as on the other backends.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import Future
from typing import Any

from iris.actors.current import current_context
from iris.actors.future import ActorFuture
from iris.backends.common import TaskInfo, children_var, task_var, with_remote_traceback
from iris.base.errors import ActorDiedError, JobFailedError, RemoteError, WorkerLostError

RAY_NAMESPACE = "iris"  # every Iris name lives in this Ray namespace, as its full path
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours its traceback headers


def enter(namespace: str, info: TaskInfo | None = None) -> None:
    """In a Ray worker: make the Ray backend (at `namespace`) current for this thread."""
    from iris.backends.ray.backend import RayBackend

    ctx = current_context.get()
    if not isinstance(ctx, RayBackend) or ctx.namespace != namespace:
        current_context.set(RayBackend.attached(namespace))
    if info is not None:
        task_var.set(info)


def run_task(entry: Any, namespace: str, info: TaskInfo) -> Any:
    """A job's task in a Ray worker: (fn, args, kwargs) or a command list. Jobs and actors
    it started are killed when it returns (a sub-job never outlives its parent)."""
    enter(namespace, info)
    token = children_var.set([])
    try:
        if isinstance(entry, list):
            code = subprocess.call(entry, stdin=subprocess.DEVNULL)
            if code != 0:
                raise JobFailedError(f"command {entry[0]!r} exited with code {code}")
            return code
        fn, args, kwargs = entry
        return fn(*args, **kwargs)
    finally:
        for child in children_var.get():
            child.kill()
        children_var.reset(token)


def run_item(fn: Any, item: Any, namespace: str) -> Any:
    """One map item in a Ray worker."""
    enter(namespace)
    return fn(item)


def translate(exc: BaseException, where: str) -> BaseException:
    """A Ray error as what Iris raises: the task's own exception, ActorDiedError,
    WorkerLostError, TimeoutError."""
    import ray.exceptions as rex

    if isinstance(exc, rex.RayTaskError):
        cause = getattr(exc, "cause", None)
        text = _ANSI.sub("", str(exc))
        if isinstance(cause, BaseException):
            return with_remote_traceback(cause, text, where)
        return RemoteError(f"{where}: {text.splitlines()[0] if text else 'failed'}",
                           remote_type=type(exc).__name__, remote_traceback=text)
    if isinstance(exc, rex.RayActorError | rex.ActorDiedError | rex.ActorUnavailableError):
        return ActorDiedError(f"{where}: the Ray actor died ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})")
    if isinstance(exc, rex.WorkerCrashedError | rex.NodeDiedError | rex.OutOfMemoryError):
        return WorkerLostError(f"{where}: its Ray worker died ({type(exc).__name__})")
    if isinstance(exc, rex.TaskCancelledError):
        return JobFailedError(f"{where}: cancelled")
    if isinstance(exc, rex.GetTimeoutError):
        return TimeoutError(f"{where}: {exc}")
    return exc


def future_of(obj_ref: Any, actor: str, method: str) -> ActorFuture:
    """An ActorFuture completed when the Ray ObjectRef is (errors translated)."""
    fut = ActorFuture(actor, method, "ray")

    def done(inner: Future) -> None:
        try:
            fut.set_result(inner.result())
        except BaseException as exc:
            fut.set_exception(translate(exc, f"{actor}.{method}"))

    obj_ref.future().add_done_callback(done)
    return fut
