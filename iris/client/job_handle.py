"""Following a submitted job: JobHandle (status, wait, result, the task's own error, logs).

Not the submission (jobs.py builds and sends it); the handle keeps what went on the wire
only to send it again to a controller restored from a checkpoint taken before it (same
request id: one job).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import cloudpickle

from iris.actors import ClusterContext
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import (
    ActorNotFoundError,
    ConflictError,
    DeadlineExceededError,
    InvalidRequestError,
    JobFailedError,
    NotFoundError,
    PeerUnavailableError,
    RemoteError,
)
from iris.client import checks
from iris.client.retry import ask_controller as _controller
from iris.logstore.config import LogStoreConfig, open_sink
from iris.logstore.model import LogLine, job_prefix
from iris.logstore.reader import LogFilter, follow_logs, read_logs
from iris.wire.states import TERMINAL_JOB, JobState

TERMINAL = frozenset(state.value for state in TERMINAL_JOB)
# How long a controller that has the call may take to answer past the caller's deadline (a
# loaded host, a long turn). An unreachable one is tried again only until the deadline: a
# wait(5) during a controller outage took 33 s and then raised PeerUnavailableError.
_REPLY_SLACK_S = 30.0
# The controller's `wait` holds a call at most this long; a longer wait is several calls.
_WAIT_STEP_S = 60.0


class JobHandle:
    """A submitted job. Every method asks the controller; the handle holds the id and, when
    it made the job, the submission as it went on the wire (to resubmit it to a controller
    restored from a checkpoint taken before it: same request id, so never twice)."""

    def __init__(self, job_id: str, ctx: ClusterContext, submission: dict | None = None):
        self.job_id = job_id
        self._ctx = ctx
        self._submission = submission
        self._submitted_at = SYSTEM_CLOCK.wall()

    def __repr__(self) -> str:
        return f"JobHandle({self.job_id!r})"

    def status(self) -> dict:
        return self._ask("status", self.job_id)

    def _ask(self, method: str, *args: Any, timeout_s: float = 60.0,
             retry_s: float | None = None) -> Any:
        try:
            return _controller(self._ctx, method, *args, timeout_s=timeout_s, retry_s=retry_s)
        except NotFoundError as exc:
            restored = _controller(self._ctx, "restored")
            if restored is None or f"no job {self.job_id}" not in str(exc):
                raise
            if self._submission is None:
                raise NotFoundError(
                    f"{exc}: its controller was restored from checkpoint "
                    f"{restored['checkpoint']}; a job submitted after that checkpoint was "
                    "taken was lost with the machine: submit it again") from exc
            if restored["at"] < self._submitted_at:
                raise  # submitted after the restore, so not lost in it (pruned, say)
        # The controller does not know the job it acknowledged: it lost its machine and came
        # back from an older checkpoint. Submit it again; its request id keeps it one job.
        print(f"iris: job {self.job_id} was not in the controller's restored state (checkpoint "
              f"{restored['checkpoint']}, taken before it was submitted); resubmitting it "
              "with its request id", file=sys.stderr, flush=True)
        answer = _controller(self._ctx, "submit", self._submission)
        if answer["job_id"] != self.job_id:
            raise ConflictError(f"resubmitting {self.job_id} made {answer['job_id']}")
        return _controller(self._ctx, method, *args, timeout_s=timeout_s, retry_s=retry_s)

    def tasks(self) -> list[dict]:
        return self.status()["tasks"]

    def summary(self) -> dict:
        """What each task and attempt waited, ran and used; the totals (`iris job summary`)."""
        return self._ask("job_summary", self.job_id)

    def wait(self, timeout: float | None = None) -> dict:
        """Block until the job ends (or `timeout` s pass); its final status. With a timeout,
        a controller that cannot be reached by then raises DeadlineExceededError (a
        TimeoutError); without one, it is waited for as any call waits (90 s)."""
        timeout = checks.wait_s(timeout)
        clock = SYSTEM_CLOCK
        deadline = None if timeout is None else clock.monotonic() + timeout
        try:
            while True:
                left = _WAIT_STEP_S if deadline is None else max(deadline - clock.monotonic(),
                                                                 0.0)
                step = min(left, _WAIT_STEP_S)
                retry_s = None if deadline is None else step
                state = self._ask("wait", self.job_id, step,
                                  timeout_s=step + _REPLY_SLACK_S, retry_s=retry_s)
                if deadline is None:
                    if state in TERMINAL:
                        return self.status()
                elif state in TERMINAL or clock.monotonic() >= deadline:
                    return self._ask("status", self.job_id,
                                     retry_s=max(deadline - clock.monotonic(), 0.0))
        except (PeerUnavailableError, ActorNotFoundError) as exc:
            if deadline is None:
                raise
            raise DeadlineExceededError(
                f"job {self.job_id}: the controller at {self._ctx.address} could not be "
                f"reached within the wait's {timeout:g} s ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0]}); the job may still be running") from exc

    def kill(self) -> dict:
        """Kill the job; from the answer on, calls from this process to the actors it
        served fail with ActorDiedError, though their processes may still be stopping."""
        answer = _controller(self._ctx, "kill", self.job_id)
        self._ctx.actors_ended(self.job_id)
        return answer

    def done(self, timeout: float | None = None) -> bool:
        """Has the job ended (one status call)? With `timeout`, a controller that cannot be
        reached is tried again for at most that long (then DeadlineExceededError)."""
        if timeout is None:
            return self.status()["state"] in TERMINAL
        try:
            return self._ask("status", self.job_id, retry_s=timeout)["state"] in TERMINAL
        except (PeerUnavailableError, ActorNotFoundError) as exc:
            raise DeadlineExceededError(
                f"job {self.job_id}: the controller at {self._ctx.address} could not be "
                f"reached within {timeout:g} s ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0]})") from exc

    def result(self, timeout: float | None = None) -> Any:
        """The callable's return value (a list, one per task, when the job has several).
        TimeoutError if it has not ended within `timeout` s (it keeps running)."""
        status = self.wait(timeout)
        if status["state"] not in TERMINAL:
            raise TimeoutError(f"job {self.job_id} did not end within {timeout} s (it is "
                               f"{status['state']})")
        if status["state"] != JobState.SUCCEEDED:
            raise self._failure(status)
        blobs = _controller(self._ctx, "results", self.job_id)
        values = [_unwrap(blobs[i]) if i in blobs else None for i in range(status["num_tasks"])]
        return values[0] if len(values) == 1 else values

    def _failure(self, status: dict) -> BaseException:
        """The task's own exception when one was raised and can be rebuilt here (its type,
        `remote_traceback`, and a note with the job's story); else JobFailedError."""
        story = (f"job {self.job_id} ended {status['state']}"
                 + "".join(f"; task {t['index']}: {t['attempts']} attempt(s), "
                           f"{t['failures']} failure(s), {t['preemptions']} preemption(s)"
                           for t in status.get("tasks", [])))
        failed = [t for t in status.get("tasks", []) if t.get("has_result")
                  and t["state"] != JobState.SUCCEEDED]
        if failed and status["state"] == JobState.FAILED:
            try:
                blobs = _controller(self._ctx, "results", self.job_id)
                kind, exc, *rest = cloudpickle.loads(blobs[failed[0]["index"]])
            except Exception:  # its class is not importable here: say what we know instead
                kind = None
            # Not a SystemExit or KeyboardInterrupt raised in the task: raised here it would
            # end the caller's program past its `except Exception`. JobFailedError says it.
            if kind == "error" and isinstance(exc, Exception):
                remote = rest[0] if rest else ""
                try:
                    exc.remote_traceback = remote
                    exc.job_status = status
                except AttributeError:  # __slots__: the note still carries it
                    pass
                shown = "" if isinstance(exc, RemoteError) else (  # its str() shows it
                    f"Remote traceback (task {failed[0]['index']} of {self.job_id}):\n"
                    f"{remote.rstrip()}\n")
                exc.add_note(f"{shown}({story})")
                return exc
        errors = [f"task {t['index']}: {t['error']}" for t in status.get("tasks", [])
                  if t.get("error")]
        return JobFailedError(f"{story}: {status.get('error') or ''}\n" + "\n".join(errors),
                              status)

    def logs(self, follow: bool = False, task: int | None = None, since: float | None = None,
             grep: str | None = None, build: bool = False) -> Iterator[LogLine]:
        """Lines from the log store (not the worker), merged by time; `follow` until it ends.

        Each LogLine has `ts` (wall-clock epoch seconds), `iso` (the same as ISO-8601 UTC),
        `stream` ("stdout"/"stderr"), `task`, `attempt` and `text` (without its newline);
        `format_line` shows it as `[task N/attempt M] text`. stdout and stderr come merged in
        the order the task wrote them. `build=True` gives the environment build's output
        (uv, stream "build") instead, which is kept out of the task's own lines.

        A job the controller does not know is NotFoundError here, not an empty log; one it
        pruned (ended long ago) still gives what the log store kept, which outlives it.
        """
        flt = LogFilter(task=task, since=since, grep=grep, build=build)
        sink = _sink(_controller(self._ctx, "log_config"))
        if not self._known_to_controller(sink):
            follow = False  # pruned: it has ended, and status() can no longer say so
        if follow:
            return follow_logs(sink, self.job_id, lambda: self.status()["state"] in TERMINAL,
                               flt)
        return iter(read_logs(sink, self.job_id, flt))

    def _known_to_controller(self, sink: Any) -> bool:
        """Whether the controller knows this job; NotFoundError naming it if neither the
        controller nor the log store does (a job id that never existed here)."""
        try:
            self.status()
            return True
        except NotFoundError as exc:
            try:
                kept = bool(sink.list_dirs(job_prefix(self.job_id)))
            except InvalidRequestError:  # not even a job id's shape
                kept = False
            if not kept:
                raise NotFoundError(f"{exc} (never run on this cluster, or pruned with no "
                                    "logs kept)") from exc
            return False


def _sink(config: dict) -> Any:
    return open_sink(LogStoreConfig(**config))


def _unwrap(blob: bytes) -> Any:
    kind, value, *_ = cloudpickle.loads(blob)
    if kind == "error":
        raise value
    return value
