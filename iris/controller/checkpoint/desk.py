"""The controller's side of checkpointing: its thread, and the callers waiting on it.

Runs on the node's loop (the Controller actor's async methods), never on the controller's
own thread: a durable submit or an operator's `iris cluster checkpoint` waits here while
scheduling goes on. Waiters are resolved by the checkpoint thread through `call_in_loop`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris.base.errors import StorageError
from iris.controller.checkpoint.archive import summary
from iris.controller.checkpoint.runner import Checkpointer
from iris.controller.checkpoint.settings import CheckpointSettings


class CheckpointDesk:
    def __init__(self, settings: CheckpointSettings, state_dir: Path, node: Any,
                 on_fenced: Callable[[str], None] | None = None):
        self._node = node
        self._waiters: list[tuple[int, asyncio.Future]] = []  # loop thread only
        self.runner = Checkpointer(state_dir, settings.open(), settings.policy, node.clock,
                                   self._done, settings.lease, on_fenced).start()

    def stop(self) -> None:
        self.runner.stop()

    async def take(self, timeout_s: float) -> dict:
        """A checkpoint that started after this call: it holds everything acknowledged
        before it. Concurrent callers share one (group commit)."""
        ticket = self.runner.request()
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((ticket, fut))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            why = self.runner.last_error or "the checkpoint is still being written"
            raise StorageError(f"no checkpoint within {timeout_s:.0f} s ({why})") from None
        finally:
            self._waiters = [(t, f) for t, f in self._waiters if f is not fut]

    async def listing(self) -> dict:
        loop = asyncio.get_running_loop()
        listed = await loop.run_in_executor(None, self.runner.bucket.list)
        return {**self.runner.status(),
                "checkpoints": [summary(m) if "error" not in m else m for m in listed]}

    def _done(self, result: dict, ticket: int) -> None:  # on the checkpoint thread
        self._node.call_in_loop(self._resolve, result, ticket)

    def _resolve(self, result: dict, ticket: int) -> None:
        for t, fut in self._waiters:
            if t <= ticket and not fut.done():
                if "error" in result:
                    fut.set_exception(StorageError(result["error"]))
                else:
                    fut.set_result(summary(result) | {"pack_s": result["pack_s"],
                                                      "upload_s": result["upload_s"],
                                                      "where": result["where"]})
