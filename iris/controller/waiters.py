"""Clients waiting for their jobs to end (`Controller.wait`), without holding the actor's
thread: each waits on a future on the node's loop, woken from there when the job finishes.

Touched on the loop thread only (the actor hands the finished jobs over with
`Node.call_in_loop`). Not the job states: they are read through `job_state`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from iris.base.errors import NotFoundError


class JobWaiters:
    def __init__(self, job_state: Callable[[str], str | None], terminal: Collection[str]):
        self._job_state, self._terminal = job_state, terminal
        self._waiters: dict[str, list[asyncio.Future]] = {}

    async def wait(self, job_id: str, timeout_s: float | None) -> str:
        """The job's state once it has ended, or its current state after `timeout_s`."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(job_id, []).append(waiter)
        try:
            # A read-only peek from the loop thread: registering first, then reading, means
            # a finish on the actor thread either is seen here or wakes the waiter.
            state = self._job_state(job_id)
            if state is None:
                raise NotFoundError(f"no job {job_id}")
            if state not in self._terminal:
                try:
                    await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
                except TimeoutError:
                    pass
        finally:
            waiters = self._waiters.get(job_id, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiters.pop(job_id, None)
        return self._job_state(job_id)

    def wake(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            for waiter in self._waiters.get(job_id, []):
                if not waiter.done():
                    waiter.set_result(None)
