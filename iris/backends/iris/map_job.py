"""`iris.map` on an Iris cluster: ONE job whose tasks pull chunks of items from the caller.

Not the bookkeeping (map_book.py, pure). The caller serves a MapCoordinator actor in its own
node; the job's N tasks each run `map_worker`, which calls `exchange` in a loop: hand in the
results of the last chunk, get the next. Chunks are sized by the worker to ~50 ms of work
(one item at first; no-op items then come 1,024 at a time), so per-item cost is a share of
one call, and a long item is never queued behind another. A task that dies (preempted,
killed) has its items handed to the next asker, up to `retries` times each; Iris restarts
the task itself (its failure and preemption budgets). The driver watches the job and tells
the coordinator when a task is gone for good.
"""

from __future__ import annotations

import asyncio
import os
from queue import SimpleQueue
from typing import Any

import cloudpickle

from iris.actors import ActorRef, actor
from iris.backends.common import format_exc, task_info
from iris.backends.iris.map_book import MapBook
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import PeerUnavailableError, RemoteError, WorkerLostError

# A worker waiting for items (all handed out, some may come back from a dead task) asks
# again after this long: short enough that a requeued item waits little, long enough that
# idle workers cost nothing noticeable.
_IDLE_WAIT_S = 1.0
# Work per chunk a worker aims at, and the most items in one chunk.
_CHUNK_S = 0.05
_MAX_CHUNK = 1024


@actor
class MapCoordinator:
    """Hands out chunks, takes results. Every method runs on the node's loop (async), so
    the book is touched by one thread only. Results go to `out`, the driver's queue."""

    def __init__(self, items: list, retries: int, tasks: int, out: SimpleQueue):
        self._items = items
        self._book = MapBook(len(items), retries, tasks)
        self._out = out
        self._cancelled = False
        self._wake: asyncio.Event | None = None

    async def exchange(self, task: int, attempt: str, results: list,
                       want: int) -> list | None:
        counted = set(self._book.report(task, attempt, [r[0] for r in results]))
        for row in results:
            if row[0] in counted:
                self._out.put(row)
        if self._cancelled or self._book.done:
            return None
        given, lost = self._book.take(task, attempt, max(1, min(want, _MAX_CHUNK)))
        self._lost(lost)
        if given:
            return [(i, self._items[i]) for i in given]
        if self._wake is None or self._wake.is_set():
            self._wake = asyncio.Event()
        try:
            await asyncio.wait_for(self._wake.wait(), _IDLE_WAIT_S)
        except TimeoutError:
            pass
        return None if self._cancelled or self._book.done else []

    async def task_ended(self, task: int) -> int:
        lost = self._book.task_ended(task)
        self._lost(lost)
        if self._wake is not None:
            self._wake.set()  # items came back: idle workers take them now
        return len(lost)

    async def cancel(self) -> None:
        self._cancelled = True
        if self._wake is not None:
            self._wake.set()

    def _lost(self, indices: list[int]) -> None:
        for i in indices:
            tries = self._book.tries.get(i, 0)
            self._out.put((i, False, WorkerLostError(
                f"iris.map input {i}: the task running it died {tries} times "
                f"(retries={self._book.retries})", i), ""))


def map_worker(coordinator: ActorRef, fn: Any) -> int:
    """A task of the map's job: pull chunks until there are none; how many items it ran."""
    info = task_info()
    attempt = os.environ.get("IRIS_ATTEMPT_ID", "")
    clock = SYSTEM_CLOCK
    results: list = []
    want, ran = 1, 0
    while True:
        try:
            chunk = coordinator.exchange(info.index, attempt, results, want).result()
        except PeerUnavailableError:
            return ran  # the caller is gone: nothing to hand results to
        if chunk is None:
            return ran
        results = []
        start = clock.monotonic()
        for index, item in chunk:
            try:
                results.append((index, True, fn(item), ""))
            except BaseException as exc:  # a SystemExit in fn fails its item, not the worker
                results.append((index, False, _portable(exc), format_exc(exc)))
        if chunk:
            ran += len(chunk)
            per_item = (clock.monotonic() - start) / len(chunk)
            want = max(1, min(_MAX_CHUNK, int(_CHUNK_S / per_item) if per_item > 0
                              else _MAX_CHUNK))
            results = _sendable(results)


def _portable(exc: BaseException) -> BaseException:
    """`exc`, or a RemoteError naming its type when it cannot be pickled to the caller or is
    not an Exception (a SystemExit or KeyboardInterrupt raised there would end the caller)."""
    try:
        if isinstance(exc, Exception):
            cloudpickle.dumps(exc)
            return exc
    except Exception:
        pass
    return RemoteError(f"{type(exc).__name__}: {exc}", remote_type=type(exc).__name__)


def _sendable(results: list) -> list:
    """The results, with a value that cannot be pickled replaced by the error saying so."""
    try:
        cloudpickle.dumps(results)
        return results
    except Exception:
        pass
    fixed = []
    for index, ok, value, tb in results:
        try:
            cloudpickle.dumps(value)
            fixed.append((index, ok, value, tb))
        except Exception as exc:
            fixed.append((index, False, TypeError(
                f"iris.map input {index}: its result could not be pickled to the caller "
                f"({type(exc).__name__}: {exc})"), ""))
    return fixed
