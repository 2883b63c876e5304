"""Fencing of task attempts by attempt number: a pure table, no processes, no clock.

The controller numbers each task's attempts 0, 1, 2, ... and a newer number always wins.
The table answers two questions for the worker: is a message about attempt N of task T
current (else StaleAttemptError, nothing changes), and may attempt N start now (only once
every older attempt of T on this worker has ended, so two attempts never run at once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iris.base.errors import ConflictError, InvalidRequestError, StaleAttemptError


@dataclass
class _TaskAttempts:
    current: int
    launched: bool = False
    running: set[int] = field(default_factory=set)  # attempt numbers with a live process


def _check_args(task_id: str, attempt: int) -> None:
    if not isinstance(task_id, str) or not task_id:
        raise InvalidRequestError(f"task_id: expected a non-empty string, got {task_id!r}",
                                  "task_id")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise InvalidRequestError(f"attempt: expected an int >= 0, got {attempt!r}", "attempt")


class AttemptTable:
    """Current attempt per task on one worker. Every refusal leaves the table unchanged."""

    def __init__(self) -> None:
        self._tasks: dict[str, _TaskAttempts] = {}

    def current(self, task_id: str) -> int | None:
        entry = self._tasks.get(task_id)
        return entry.current if entry else None

    def claim(self, task_id: str, attempt: int) -> list[int]:
        """Make `attempt` current. Returns older attempts still running: stop them first.

        Raises StaleAttemptError for an attempt older than the current one and
        ConflictError for the current one claimed twice.
        """
        self.check_claimable(task_id, attempt)
        entry = self._tasks.get(task_id)
        if entry is not None:
            entry.current, entry.launched = attempt, False
        else:
            entry = self._tasks[task_id] = _TaskAttempts(current=attempt)
        return sorted(entry.running)

    def check_claimable(self, task_id: str, attempt: int) -> None:
        """Raise what `claim` would raise, changing nothing."""
        _check_args(task_id, attempt)
        entry = self._tasks.get(task_id)
        if entry is None:
            return
        if attempt < entry.current:
            raise StaleAttemptError(
                f"task {task_id}: attempt {attempt} is stale (attempt {entry.current} "
                "is current); refused"
            )
        if attempt == entry.current:
            raise ConflictError(f"task {task_id}: attempt {attempt} was already claimed")

    def check(self, task_id: str, attempt: int) -> None:
        """Raise StaleAttemptError unless `attempt` is the current attempt of `task_id`."""
        _check_args(task_id, attempt)
        entry = self._tasks.get(task_id)
        if entry is None or entry.current != attempt:
            now = "none" if entry is None else str(entry.current)
            raise StaleAttemptError(
                f"task {task_id}: attempt {attempt} is not current (current: {now}); refused"
            )

    def may_launch(self, task_id: str, attempt: int) -> bool:
        """True when `attempt` is current, not yet launched, and no older one still runs."""
        self.check(task_id, attempt)
        entry = self._tasks[task_id]
        return not entry.launched and not entry.running

    def launched(self, task_id: str, attempt: int) -> None:
        """Record that the current attempt's process started."""
        if not self.may_launch(task_id, attempt):
            raise ConflictError(
                f"task {task_id}: attempt {attempt} cannot launch (already launched or an "
                f"older attempt still runs: {sorted(self._tasks[task_id].running)})"
            )
        entry = self._tasks[task_id]
        entry.launched = True
        entry.running.add(attempt)

    def ended(self, task_id: str, attempt: int) -> None:
        """Record that an attempt's process is gone (current or superseded: a fact, not a
        request, so it is never refused as stale)."""
        _check_args(task_id, attempt)
        entry = self._tasks.get(task_id)
        if entry is not None:
            entry.running.discard(attempt)

    def forget(self, task_id: str) -> None:
        """Drop a task whose attempts all ended (its job finished)."""
        entry = self._tasks.get(task_id)
        if entry is not None and entry.running:
            raise ConflictError(f"task {task_id}: attempts {sorted(entry.running)} still run")
        self._tasks.pop(task_id, None)

    def running_of(self, task_id: str) -> list[int]:
        entry = self._tasks.get(task_id)
        return sorted(entry.running) if entry else []

    def running(self) -> dict[str, list[int]]:
        return {t: sorted(e.running) for t, e in self._tasks.items() if e.running}
