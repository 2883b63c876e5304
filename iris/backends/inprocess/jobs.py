"""In-process jobs: each task a thread (or a child process), a handle shaped like JobHandle.

Not the scheduler: a task starts at once. The outcome follows Iris: `result()` is the
value (a list with replicas), a task's exception is re-raised as itself with
`remote_traceback` and a note; `max_retries_failure` reruns a failed task; `timeout` ends
the job FAILED; `kill()` ends it KILLED. A thread cannot be killed: a killed or timed-out
thread task gets TaskKilled raised in it (an asynchronous exception, seen at its next
Python bytecode: a loop stops at once, a blocking call such as a 60 s sleep first
returns); a task in a child process is killed. Arguments reach the task as copies (unpickled from the pickle
checked at submit), as they would over the wire, so shared-mutation bugs show here too.
"""

from __future__ import annotations

import contextvars
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

from iris.backends.common import (
    TaskInfo,
    children_var,
    format_exc,
    task_var,
    with_remote_traceback,
)
from iris.backends.inprocess.interrupt import TaskKilled, interrupt
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import JobFailedError
from iris.wire.states import TERMINAL_JOB, JobState, TaskState

_TERMINAL = frozenset(s.value for s in TERMINAL_JOB)


class _Task:
    __slots__ = ("index", "num_tasks", "state", "attempts", "failures", "error", "value", "exc",
                 "proc")

    def __init__(self, index: int, num_tasks: int):
        self.index = index
        self.num_tasks = num_tasks
        self.state = TaskState.PENDING.value
        self.attempts = self.failures = 0
        self.error = ""
        self.value: Any = None
        self.exc: BaseException | None = None
        self.proc: subprocess.Popen | None = None

    def row(self) -> dict:
        return {"index": self.index, "state": self.state, "attempts": self.attempts,
                "failures": self.failures, "preemptions": 0, "error": self.error,
                "has_result": self.exc is not None or self.state == "succeeded"}


class LocalJob:
    """A job of the in-process backend: `job_id`, wait, status, result, kill, done, logs."""

    def __init__(self, job_id: str, replicas: int, retries: int, timeout: float | None):
        self.job_id = job_id
        self._tasks = [_Task(i, replicas) for i in range(replicas)]
        self._retries = retries
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._state = JobState.RUNNING.value
        self._error = ""
        self._threads: list[threading.Thread] = []
        self._callbacks: list[Callable[[LocalJob], Any]] = []
        self.children: list = []  # sub-jobs its tasks started: killed when it ends
        if timeout is not None:
            timer = threading.Timer(timeout, self._end, (JobState.FAILED.value,
                                                         f"timed out after {timeout} s"))
            timer.daemon = True
            timer.name = "iris-inprocess-timeout"
            self._timer: threading.Timer | None = timer
        else:
            self._timer = None

    def __repr__(self) -> str:
        return f"LocalJob({self.job_id!r})"

    # ------------------------------------------------------------ starting

    def start(self, body: Callable[[_Task], Any], run_in: contextvars.Context) -> None:
        if self._timer is not None:
            self._timer.start()
        for task in self._tasks:
            ctx = run_in.copy()
            ctx.run(task_var.set, TaskInfo(self.job_id, task.index, len(self._tasks)))
            ctx.run(children_var.set, self.children)
            thread = threading.Thread(target=ctx.run, args=(self._run_task, task, body),
                                      daemon=True, name=f"iris-inprocess-task-{self.job_id}-"
                                                        f"{task.index}")
            self._threads.append(thread)
            thread.start()

    def _run_task(self, task: _Task, body: Callable[[_Task], Any]) -> None:
        while True:
            task.attempts += 1
            task.state = TaskState.RUNNING.value
            try:
                value = body(task)
            except TaskKilled:
                return
            except BaseException as exc:
                task.failures += 1
                with_remote_traceback(exc, format_exc(exc),
                                      f"task {task.index} of {self.job_id}")
                if task.failures <= self._retries and self._state == "running":
                    continue
                task.exc, task.state = exc, TaskState.FAILED.value
                task.error = f"{type(exc).__name__}: {exc}"
                self._end(JobState.FAILED.value, f"task {task.index} failed")
                return
            task.value, task.state = value, TaskState.SUCCEEDED.value
            if all(t.state == "succeeded" for t in self._tasks):
                self._end(JobState.SUCCEEDED.value, "")
            return

    def _end(self, state: str, error: str) -> None:
        with self._lock:
            if self._state in _TERMINAL:
                return
            self._state, self._error = state, error
            for task in self._tasks:
                if task.state not in ("succeeded", "failed"):
                    task.state = TaskState.KILLED.value
                    if task.proc is not None and task.proc.poll() is None:
                        task.proc.kill()
            callbacks, self._callbacks = self._callbacks, []
        if self._timer is not None:
            self._timer.cancel()
        if state != JobState.SUCCEEDED.value:
            self._interrupt_threads()
        self._ended.set()
        for child in list(self.children):
            child.kill()
        for fn in callbacks:
            fn(self)

    def _interrupt_threads(self) -> None:
        for thread in self._threads:
            interrupt(thread)

    # ------------------------------------------------------------ the handle

    def done(self) -> bool:
        return self._ended.is_set()

    def add_done_callback(self, fn: Callable[[LocalJob], Any]) -> None:
        with self._lock:
            if self._state not in _TERMINAL:
                self._callbacks.append(fn)
                return
        fn(self)

    def status(self) -> dict:
        return {"job_id": self.job_id, "name": self.job_id, "state": self._state,
                "num_tasks": len(self._tasks), "error": self._error,
                "tasks": [t.row() for t in self._tasks]}

    def tasks(self) -> list[dict]:
        return self.status()["tasks"]

    def wait(self, timeout: float | None = None) -> dict:
        self._ended.wait(timeout)
        return self.status()

    def kill(self) -> dict:
        self._end(JobState.KILLED.value, "killed by the user")
        return self.status()

    def join_threads(self, timeout: float) -> None:
        deadline = SYSTEM_CLOCK.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - SYSTEM_CLOCK.monotonic(), 0))

    def result(self, timeout: float | None = None) -> Any:
        if not self._ended.wait(timeout):
            raise TimeoutError(f"job {self.job_id} did not end within {timeout} s "
                               "(it is still running)")
        if self._state != "succeeded":
            failed = [t for t in self._tasks if t.exc is not None]
            # Not a SystemExit or KeyboardInterrupt the task raised: raised here it would end
            # the caller's program (as on Iris, iris/client/job_handle.py, JobFailedError).
            if failed and self._state == "failed" and isinstance(failed[0].exc, Exception):
                raise failed[0].exc
            told = "".join(f"; task {t.index}: {t.error}" for t in failed)
            raise JobFailedError(f"job {self.job_id} ended {self._state}: {self._error}{told}",
                                 self.status())
        values = [t.value for t in self._tasks]
        return values[0] if len(values) == 1 else values

    def logs(self, follow: bool = False, **_: Any) -> Iterator[str]:
        """In process, a task's prints go to this process's own stdout; nothing is kept."""
        return iter(())


def run_in_child(payload: bytes, env: dict[str, str], task: _Task) -> Any:
    """Run a pickled (fn, args, kwargs) in a child process of its own: its value, or its
    exception re-raised. Pipes only: the payload on stdin, the result on another pipe."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(write_fd)], stdin=subprocess.PIPE,
            pass_fds=(write_fd,), env=env, start_new_session=True)
    finally:
        os.close(write_fd)
    task.proc = proc
    with os.fdopen(read_fd, "rb") as results:
        proc.stdin.write(payload)
        proc.stdin.close()
        blob = results.read()
    code = proc.wait()
    if not blob:
        raise JobFailedError(f"task {task.index}: its process exited with code {code} "
                             "before giving a result")
    kind, value, *rest = cloudpickle.loads(blob)
    if kind == "error":
        raise with_remote_traceback(value, rest[0] if rest else "", "child process")
    return value


# The child: read (fn, args, kwargs) from stdin, write ("ok", value) or ("error", exc, tb)
# to the fd it was given. A fresh in-process backend serves its own nested iris.* calls. An
# exception that cannot travel as a pickle (it holds a lock; its pickle does not load) goes
# as RemoteError naming its type, with its traceback, as from a worker (task_runtime.py).
_CHILD = """
import os, sys, traceback, cloudpickle
out = os.fdopen(int(sys.argv[1]), "wb")
try:
    fn, args, kwargs = cloudpickle.loads(sys.stdin.buffer.read())
    result = ("ok", fn(*args, **kwargs))
except BaseException as exc:
    result = ("error", exc, traceback.format_exc())
try:
    data = cloudpickle.dumps(result)
    if result[0] == "error":
        cloudpickle.loads(data)
except Exception as exc:
    why = f"{type(exc).__name__}: {exc}"
    if result[0] == "error":
        from iris.base.errors import RemoteError
        raised = result[1]
        kind = f"{type(raised).__module__}.{type(raised).__qualname__}"
        data = cloudpickle.dumps(("error", RemoteError.unpicklable(kind, str(raised), why),
                                  result[2]))
    else:
        data = cloudpickle.dumps(("error", RuntimeError(
            f"the task's return value could not be pickled: {why}"), ""))
out.write(data)
out.close()
"""


def command_task(argv: list[str], env: dict[str, str], task: _Task) -> int:
    """Run a command; its exit code, or an error naming it when not zero."""
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    task.proc = proc
    code = proc.wait()
    if code != 0:
        raise JobFailedError(f"task {task.index}: command {argv[0]!r} exited with code {code}")
    return code
