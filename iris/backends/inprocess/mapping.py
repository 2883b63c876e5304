"""`iris.map` in process: a pool of threads (or of child processes) pulling chunks of items.

Not the map's front (backends/mapping.py). Threads take chunks of indices from one shared
counter, so a no-op item costs about a microsecond (no future, no queue entry per item);
results come back one queue entry per chunk. With process isolation the chunks go to a
ProcessPoolExecutor; a child that dies (BrokenProcessPool) loses its chunk, whose items are
tried again on a fresh pool up to `retries` times, then fail with WorkerLostError.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
import itertools
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator
from queue import SimpleQueue
from typing import Any

import cloudpickle

from iris.backends.common import format_exc, with_remote_traceback
from iris.backends.mapping import MapOptions
from iris.base.errors import WorkerLostError

# Items per chunk: large enough that the per-chunk cost (a lock, a queue entry) vanishes
# against 50,000 no-op items/s, small enough that max_parallel threads share the work.
_MAX_CHUNK = 64


def _chunk_size(total: int, workers: int) -> int:
    return max(1, min(_MAX_CHUNK, total // (workers * 4) or 1))


def thread_stream(fn: Callable, items: list, opts: MapOptions,
                  run_in: contextvars.Context) -> Iterator[tuple[int, bool, Any]]:
    total = len(items)
    workers = max(1, min(opts.max_parallel or (os.cpu_count() or 1) * 4, total))
    chunk = _chunk_size(total, workers)
    starts = itertools.count(0, chunk)  # next() on a count is atomic under the GIL
    out: SimpleQueue = SimpleQueue()
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            first = next(starts)
            if first >= total:
                break
            done = []
            for i in range(first, min(first + chunk, total)):
                if stop.is_set():
                    break
                try:
                    done.append((i, True, fn(items[i])))
                except BaseException as exc:
                    done.append((i, False, with_remote_traceback(
                        exc, format_exc(exc), f"iris.map input {i}, in process")))
            out.put(done)
        out.put(None)

    threads = [threading.Thread(target=run_in.copy().run, args=(work,), daemon=True,
                                name=f"iris-inprocess-map-{n}") for n in range(workers)]
    for thread in threads:
        thread.start()
    try:
        running = workers
        while running:
            batch = out.get()
            if batch is None:
                running -= 1
                continue
            yield from batch
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _run_chunk(payload: bytes, indices: list[int]) -> bytes:
    """In a child process: run fn over the chunk's items; the pickled rows."""
    fn, items = cloudpickle.loads(payload)
    done = []
    for i, item in zip(indices, items, strict=True):
        try:
            done.append((i, True, fn(item)))
        except BaseException as exc:
            done.append((i, False, (exc, format_exc(exc))))
    return cloudpickle.dumps(done)


def process_stream(fn: Callable, items: list, opts: MapOptions) -> Iterator[tuple]:
    """Chunks to child processes; a dead child's chunk is retried up to `retries` times."""
    total = len(items)
    workers = max(1, min(opts.max_parallel or os.cpu_count() or 1, total))
    chunk = _chunk_size(total, workers)
    queue = [list(range(s, min(s + chunk, total))) for s in range(0, total, chunk)]
    tries = dict.fromkeys(range(total), 0)
    pool = _pool(workers)
    running: dict[cf.Future, list[int]] = {}
    try:
        while queue or running:
            while queue and len(running) < workers * 2:
                indices = queue.pop(0)
                payload = cloudpickle.dumps((fn, [items[i] for i in indices]))
                running[pool.submit(_run_chunk, payload, indices)] = indices
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            broken = False
            for fut in finished:
                indices = running.pop(fut)
                try:
                    rows = cloudpickle.loads(fut.result())
                except cf.process.BrokenProcessPool:
                    broken = True
                    yield from _retry_or_fail(indices, tries, opts.retries, queue)
                    continue
                for i, ok, value in rows:
                    if not ok:
                        value = with_remote_traceback(value[0], value[1],
                                                      f"iris.map input {i}, child process")
                    yield i, ok, value
            if broken:  # every chunk on the broken pool is lost with it
                for fut, indices in list(running.items()):
                    running.pop(fut)
                    yield from _retry_or_fail(indices, tries, opts.retries, queue)
                pool.shutdown(wait=False, cancel_futures=True)
                pool = _pool(workers)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _retry_or_fail(indices: list[int], tries: dict[int, int], retries: int,
                   queue: list[list[int]]) -> Iterator[tuple]:
    again = []
    for i in indices:
        tries[i] += 1
        if tries[i] > retries:
            yield i, False, WorkerLostError(
                f"iris.map input {i}: its worker process died {tries[i]} times "
                f"(retries={retries})", i)
        else:
            again.append(i)
    if again:
        queue.insert(0, again)


def _pool(workers: int) -> cf.ProcessPoolExecutor:
    # forkserver: children start from a clean process, not a fork of this threaded one.
    return cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver"))
