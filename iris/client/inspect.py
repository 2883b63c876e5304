"""Looking inside a job from the client side: its summary, a live task's stacks and profile,
a command run in a task's environment, where a named port listens. Not the CLI's printing
(cli/inspect.py) and not the work (the controller's and workers' inspectors).

Every call goes to the current cluster; errors arrive with their type (NotFoundError for an
unknown job or task, InvalidRequestError naming what is wrong, PermissionDeniedError for an
exec into someone else's job).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from iris.actors import current
from iris.actors.keys import INSPECT_KEY
from iris.client.budgets import admin_token as _admin_token
from iris.client.jobs import _user
from iris.client.retry import call_controller
from iris.wire.control import MAX_PROFILE_S

# A poll waits this long on the worker for new output before answering empty.
_POLL_WAIT_S = 1.0


def _inspect(method: str, *args: Any, timeout_s: float = 60.0, auth: bytes | None = None
             ) -> Any:
    ctx = current()
    return call_controller(ctx.node, ctx.address, method, args, timeout_s=timeout_s,
                           auth=auth, key=INSPECT_KEY)


def job_summary(job_id: str) -> dict:
    """Per task and attempt: queue and run time, how it ended, CPU, peak memory against the
    request, chip-hours, retries and why; the job's totals and events (iris job summary)."""
    ctx = current()
    return call_controller(ctx.node, ctx.address, "job_summary", (job_id,))


def task_stack(job_id: str, task: int = 0) -> dict:
    """Every thread's Python stack of the task's processes, now."""
    return _inspect("task_stack", {"job_id": job_id, "task_index": task})


def task_profile(job_id: str, task: int = 0, seconds: float = 10.0, rate: int = 100) -> dict:
    """A sampling profile of the live task: `folded` stacks ("f;g;h count" lines),
    `samples`, and a `note` (a task that exits mid-profile gives a partial one)."""
    return _inspect("task_profile", {"job_id": job_id, "task_index": task, "seconds": seconds,
                                     "rate": rate},
                    timeout_s=min(seconds, MAX_PROFILE_S) + 120.0)


def task_url(job_id: str, port: str, task: int = 0) -> dict:
    """Where task `task` of the job listens for its named port: host, port, url."""
    return _inspect("task_url", {"job_id": job_id, "task_index": task, "port": port})


class ExecStream:
    """A command running in a task's environment: iterate for (stream, bytes) as it
    writes; `exit_code` once it ended. `close()` stops it if it still runs."""

    def __init__(self, answer: dict):
        self.session = answer["session"]
        self.about = {k: v for k, v in answer.items() if k != "session"}
        self.exit_code: int | None = None
        self._cursor = 0

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        while self.exit_code is None:
            got = _inspect("exec_poll", {"session": self.session, "cursor": self._cursor,
                                         "wait_s": _POLL_WAIT_S})
            yield from ((stream, data) for stream, data in got["chunks"])
            self._cursor = got["cursor"]
            self.exit_code = got["exit_code"]

    def close(self) -> None:
        if self.exit_code is None:
            _inspect("exec_end", self.session)


def task_exec(job_id: str, argv: list[str], task: int = 0, *,
              admin_token_file: str | os.PathLike | None = None,
              as_operator: bool = False) -> ExecStream:
    """Run `argv` on the task's host, in its environment (venv, work dir, variables,
    memory cgroup). The job's owner may; an operator passes the admin token."""
    raw = {"job_id": job_id, "task_index": task, "argv": list(argv), "user": _user()}
    if as_operator or admin_token_file:
        token = _admin_token(Path(admin_token_file) if admin_token_file else None)
        return ExecStream(_inspect("task_exec_as_operator", raw, auth=token))
    return ExecStream(_inspect("task_exec", raw))
