"""The worker's inspector: stacks, profiles and exec sessions of the attempts this host runs,
for the controller's inspector (controller/inspector.py) only. An actor beside the Worker,
served by the worker's node under `worker_inspect_key(id)`.

Not the Worker actor: looking inside a task never waits behind starts, stops and reports,
and they never wait behind it. Every method is async and hands the blocking part (py-spy,
a process's pipes) to a small thread pool of its own. An attempt is named by its id; the
Worker's book says which process that is (`locate`), so a stale or foreign id is refused.

Every worker hosts one, and most are never asked: py-spy's wrapper and the exec sessions
are imported on the first request that needs them (~5 ms of each worker's start).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iris.actors import actor, tokens
from iris.actors.hosting import requires
from iris.base.errors import InvalidRequestError, NotFoundError
from iris.wire import control
from iris.worker.process import AttemptProcess
from iris.worker.usage import attempt_pids

if TYPE_CHECKING:
    from iris.worker.exec_sessions import ExecSessions

# Threads for inspection work: each blocks for a dump (~0.3 s), a profile (its seconds) or
# an exec poll (up to 10 s); 32 covers the exec sessions (16) with room for profiles.
_THREADS = 32

Locate = Callable[[str], AttemptProcess | None]


@actor(max_concurrency=64)
class WorkerInspector:
    # Idle or orphaned exec sessions are collected this often.
    tick_interval_s = 1.0

    def __init__(self, locate: Locate, scratch: Path):
        self._locate = locate
        self._scratch = scratch
        self._exec: ExecSessions | None = None  # made by the first exec_start
        self._pool = concurrent.futures.ThreadPoolExecutor(_THREADS, "iris-inspect")

    def _process(self, attempt_id: Any) -> AttemptProcess:
        if not isinstance(attempt_id, str) or not attempt_id:
            raise InvalidRequestError(f"attempt_id: expected an attempt id, got "
                                      f"{attempt_id!r}", "attempt_id")
        proc = self._locate(attempt_id)
        if proc is None or proc.done:
            raise NotFoundError(f"attempt {attempt_id} is not running on this worker")
        return proc

    @property
    def _sessions(self) -> ExecSessions:
        if self._exec is None:
            from iris.worker.exec_sessions import ExecSessions

            self._exec = ExecSessions()
        return self._exec

    async def _blocking(self, fn: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    @requires(tokens.CONTROLLER)
    async def stack(self, attempt_id: str) -> dict:
        """Every thread's Python stack of each of the attempt's processes (py-spy dump)."""
        proc = self._process(attempt_id)
        pids = attempt_pids(proc.pid, proc.record.start_ticks, proc.cgroup) or [proc.pid]
        from iris.worker import pyspy

        stacks = await self._blocking(pyspy.dump, sorted(pids))
        return {"attempt_id": attempt_id, "processes": [dataclasses.asdict(s) for s in stacks]}

    @requires(tokens.CONTROLLER)
    async def profile(self, raw: dict) -> dict:
        """A sampling profile of the attempt (`job_id` names the attempt here)."""
        req = control.decode(control.ProfileRequest, raw)
        proc = self._process(req.job_id)
        from iris.worker import pyspy

        got = await self._blocking(pyspy.record, proc.pid, req.seconds, req.rate,
                                   self._scratch)
        return {"attempt_id": req.job_id, **dataclasses.asdict(got)}

    @requires(tokens.CONTROLLER)
    async def exec_start(self, raw: dict) -> dict:
        req = control.decode(control.ExecStart, raw)
        proc = self._process(req.attempt_id)
        await self._blocking(self._sessions.start, req.session, req.attempt_id,
                             list(req.argv), proc)
        return {"session": req.session}

    @requires(tokens.CONTROLLER)
    async def exec_poll(self, raw: dict) -> dict:
        req = control.decode(control.ExecPoll, raw)
        session = self._sessions.get(req.session)
        out = await self._blocking(session.poll, req.cursor, req.wait_s)
        return {"chunks": [[s, d] for s, d in out.chunks], "cursor": out.cursor,
                "exit_code": out.exit_code}

    @requires(tokens.CONTROLLER)
    async def exec_end(self, session: str) -> None:
        """Kill the session's command if it still runs, and forget the session."""
        await self._blocking(self._sessions.end, str(session))

    def on_tick(self) -> None:
        if self._exec is not None:
            self._exec.sweep(lambda attempt_id: self._locate(attempt_id) is not None)

    def on_stop(self) -> None:
        if self._exec is not None:
            self._exec.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
