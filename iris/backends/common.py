"""What every backend shares: the task's own coordinates, object refs, remote errors, and
the check that arguments can travel. No backend logic, no I/O.
"""

from __future__ import annotations

import contextvars
import os
import traceback
import uuid
from dataclasses import dataclass
from typing import Any

import cloudpickle

from iris.base.errors import InvalidRequestError, RemoteError
from iris.client.checks import check_args_picklable, check_picklable

__all__ = ["ObjectRef", "TaskInfo", "adopt", "children_var", "check_args_picklable", "check_picklable",
           "check_puttable", "format_exc",
           "new_oid", "task_info", "task_var", "with_remote_traceback"]


@dataclass(frozen=True)
class TaskInfo:
    """Where the calling code runs: its job, its task index among `num_tasks`, its attempt.

    Outside any task: job_id "" and index 0 of 1. Read it with `iris.task_info()` rather than
    from os.environ: in process, tasks are threads that share one environment.
    """

    job_id: str = ""
    index: int = 0
    num_tasks: int = 1
    attempt: str = ""


# Set by the in-process and Ray backends around each task they run; an Iris task reads its
# worker's variables instead.
task_var: contextvars.ContextVar[TaskInfo | None] = contextvars.ContextVar(
    "iris_task", default=None)


# The jobs a running task started (in process and on Ray): killed when its job ends, as
# Iris kills sub-jobs with their parent (a sub-job never outlives its parent).
children_var: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "iris_children", default=None)


def adopt(job: Any) -> None:
    """Record `job` as a sub-job of the task running here, if any."""
    children = children_var.get()
    if children is not None:
        children.append(job)


def task_info() -> TaskInfo:
    info = task_var.get()
    if info is not None:
        return info
    if os.environ.get("IRIS_JOB_ID"):
        return TaskInfo(os.environ["IRIS_JOB_ID"], int(os.environ.get("IRIS_TASK_INDEX", 0)),
                        int(os.environ.get("IRIS_NUM_TASKS", 1)),
                        os.environ.get("IRIS_ATTEMPT_ID", ""))
    return TaskInfo()


@dataclass(frozen=True)
class ObjectRef:
    """A large object put with `iris.put`; `iris.get(ref)` reads it from any task or client
    of the same backend. `owner` is where it lives: an actor ref (Iris), a Ray ObjectRef, or
    None (in process). It lives as long as the process that put it, or until `iris.free`."""

    oid: str
    backend: str
    owner: Any = None

    def __repr__(self) -> str:
        return f"ObjectRef({self.oid[:12]} on {self.backend})"


def new_oid() -> str:
    return uuid.uuid4().hex


class _Discard:
    """A file that keeps nothing: a pickle written to it costs no memory."""

    @staticmethod
    def write(data: Any) -> int:
        return len(data)


def check_puttable(value: Any) -> None:
    """InvalidRequestError naming `value`'s type unless it pickles (as a reader's `get`
    will need); an object kept where it was put once failed only at its first reader.
    Pickled to nowhere, with big buffers left out of band: no copy of the object is made."""
    try:
        cloudpickle.CloudPickler(_Discard(), protocol=5,
                                 buffer_callback=lambda _: False).dump(value)
    except Exception as exc:
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        raise InvalidRequestError(
            f"iris.put: a {kind} cannot be pickled, so no other process could get it "
            f"({type(exc).__name__}: {exc}); nothing was put", "value") from exc


def with_remote_traceback(exc: BaseException, text: str, where: str) -> BaseException:
    """`exc` carrying the traceback it had where it was raised (`remote_traceback` and a
    note naming `where`), as Iris gives actor and task errors. A SystemExit, KeyboardInterrupt
    or other BaseException that is not an Exception becomes a RemoteError naming its type,
    as over the wire (iris/wire/remote_errors.py): raised as itself it would end the caller."""
    if not isinstance(exc, Exception):
        kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return RemoteError(f"{where} raised {kind}: {exc}", remote_type=kind,
                           remote_traceback=text)
    try:
        exc.remote_traceback = text
    except AttributeError:  # __slots__: the note still carries it
        pass
    if not isinstance(exc, RemoteError):  # a RemoteError's str() shows its traceback
        exc.add_note(f"Remote traceback ({where}):\n{text.rstrip()}")
    return exc


def format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
