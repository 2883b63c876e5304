"""Reads a job's logs back from a sink: every task and attempt merged by time, with filters,
once or following. Not the CLI (it calls this) and never the worker: what was flushed is
readable after the worker and its machine are gone.

Per attempt it reads the composed `log` if the attempt was closed, else its chunks in seq
order. A follower that has read chunks 0..k when the writer composes and deletes them
switches to the `log` and skips the records of chunks it already yielded (each record knows
its chunk's seq from the chunk header), so nothing is shown twice or lost.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError, NotFoundError
from iris.logstore.errors import LogStorageError
from iris.logstore.model import (
    LogLine,
    attempt_prefix,
    chunk_key,
    decode_chunks,
    job_prefix,
    log_key,
    parse_key,
    split_lines,
)
from iris.logstore.sinks import LogSink

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogFilter:
    """task: only this task index. since: only lines at or after this wall time (epoch
    seconds). grep: only lines whose text matches this regular expression (re.search).
    build: the environment build's output (uv) instead of what the task printed; the two
    are never mixed, so a task's log reads as the task wrote it."""

    task: int | None = None
    since: float | None = None
    grep: str | None = None
    build: bool = False

    def __post_init__(self) -> None:
        if self.task is not None and (not isinstance(self.task, int) or self.task < 0):
            raise InvalidRequestError(f"task must be an integer >= 0, got {self.task!r}",
                                      field="task")
        if self.since is not None and (isinstance(self.since, bool)
                                       or not isinstance(self.since, (int, float))
                                       or not math.isfinite(self.since)):
            raise InvalidRequestError(f"since must be a finite time in epoch seconds, e.g. "
                                      f"1767225600, got {self.since!r}", field="since")
        if self.grep is not None:
            try:
                re.compile(self.grep)
            except re.error as exc:
                raise InvalidRequestError(f"invalid --grep pattern {self.grep!r}: {exc}",
                                          field="grep") from exc

    def keep(self, lines: list[LogLine]) -> list[LogLine]:
        pattern = re.compile(self.grep) if self.grep is not None else None
        return [ln for ln in lines
                if (ln.stream == "build") == self.build
                and (self.since is None or ln.ts >= self.since)
                and (pattern is None or pattern.search(ln.text))]


class _AttemptCursor:
    """How far one attempt has been read."""

    def __init__(self, sink: LogSink, job: str, task: int, attempt: int):
        self._sink, self._job, self._task, self._attempt = sink, job, task, attempt
        self._prefix = attempt_prefix(job, task, attempt)
        self.next_seq = 0
        self.done = False

    def poll(self) -> list[LogLine]:
        after = chunk_key(self._job, self._task, self._attempt, self.next_seq - 1) \
            if self.next_seq else None
        refs = {}
        jp = job_prefix(self._job)
        for key in self._sink.list(self._prefix, start_after=after):
            ref = parse_key(jp, key)
            if ref is not None:
                refs[key] = ref
        if any(ref.seq is None for ref in refs.values()):
            return self._read_composed()
        lines: list[LogLine] = []
        for key, ref in sorted(refs.items(), key=lambda kv: kv[1].seq):
            if ref.seq != self.next_seq:
                break  # chunks being deleted after compose: the log shows up next poll
            try:
                data = self._sink.get(key)
            except NotFoundError:
                break
            lines.extend(self._lines(data))
            self.next_seq += 1
        return lines

    def _read_composed(self) -> list[LogLine]:
        data = self._sink.get(log_key(self._job, self._task, self._attempt))
        self.done = True
        return self._lines(data)

    def _lines(self, data: bytes) -> list[LogLine]:
        out: list[LogLine] = []
        for header, rec in decode_chunks(data):
            if header.seq >= self.next_seq:
                out.extend(split_lines(header, rec))
        return out


class _JobCursor:
    """Discovers a job's attempts and reads each one onward from where it stopped."""

    def __init__(self, sink: LogSink, job: str, task: int | None):
        self._sink, self._job, self._task = sink, job, task
        self._prefix = job_prefix(job)
        self._attempts: dict[tuple[int, int], _AttemptCursor] = {}

    def _discover(self) -> None:
        if self._task is not None:
            task_dirs = [f"{self._prefix}{self._task}/"]
        else:
            task_dirs = self._sink.list_dirs(self._prefix)
        for task_dir in task_dirs:
            task = task_dir[len(self._prefix):-1]
            if not task.isdigit():
                continue
            for att_dir in self._sink.list_dirs(f"{task_dir}attempts/"):
                attempt = att_dir[len(task_dir) + len("attempts/"):-1]
                key = (int(task), int(attempt)) if attempt.isdigit() else None
                if key is not None and key not in self._attempts:
                    self._attempts[key] = _AttemptCursor(self._sink, self._job, *key)

    def poll(self) -> list[LogLine]:
        self._discover()
        lines: list[LogLine] = []
        for _, cursor in sorted(self._attempts.items()):
            if not cursor.done:
                lines.extend(cursor.poll())
        return lines


def _merge(lines: list[LogLine]) -> list[LogLine]:
    # Stable: lines of one pipe read share a timestamp and keep their printed order, and
    # stdout and stderr of one attempt come from one reader (iris.worker.output), in order.
    return sorted(lines, key=lambda ln: (ln.ts, ln.task, ln.attempt))


def read_logs(sink: LogSink, job: str, flt: LogFilter | None = None) -> list[LogLine]:
    """Every stored line of `job` (not its child jobs), merged by timestamp."""
    flt = flt or LogFilter()
    return flt.keep(_merge(_JobCursor(sink, job, flt.task).poll()))


def follow_logs(sink: LogSink, job: str, is_finished: Callable[[], bool],
                flt: LogFilter | None = None, *, clock: Clock = SYSTEM_CLOCK,
                poll_interval_s: float = 0.5) -> Iterator[LogLine]:
    """Yield `job`'s lines as they are stored, until it has finished and nothing new remains.

    Each poll's new lines are merged by timestamp; a task whose chunk lands late can show
    lines a little older than ones already yielded. 0.5 s polls add ~0.25 s on average to
    the ~0.25 s a line waits in the shipper (plus the upload).
    """
    flt = flt or LogFilter()
    cursor = _JobCursor(sink, job, flt.task)
    while True:
        finished = is_finished()  # before the poll, so the last poll sees the final chunks
        try:
            batch = cursor.poll()
        except LogStorageError as exc:
            if not exc.transient:
                raise
            _log.warning("reading logs of %s failed, retrying: %s", job, exc)
            batch, finished = [], False
        yield from flt.keep(_merge(batch))
        if finished and not batch:
            return
        if not finished:
            clock.sleep(poll_interval_s)
