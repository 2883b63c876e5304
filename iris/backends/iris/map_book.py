"""Which map items are waiting, which are out with which task attempt, which are done. Pure.

Not the actor around it (map_coordinator.py). Rules:

- `take(task, attempt, want)`: a task asks for up to `want` items (it measured how many make
  ~50 ms of work); it gets at most a fair share of what waits (half of it split between the
  live tasks, at least one), so the tail of a map is spread, not left on one task.
- An attempt of a task that asks while an older attempt of the same task holds items
  proves the older one dead (Iris runs at most one attempt of a task at a time): those
  items go back to the front of the line, one try spent each.
- `task_ended(task)`: the task is gone for good (its job status says so): the same.
- An item whose tries exceed `retries` is lost: reported as such, not handed out again.
- `report(task, attempt, indices)`: results of items it held; a report from an attempt
  that no longer holds them (it was presumed dead) is dropped, so no item counts twice.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class MapBook:
    total: int
    retries: int
    tasks: int
    waiting: deque = field(default_factory=deque)
    held: dict = field(default_factory=dict)     # index -> (task, attempt)
    attempts: dict = field(default_factory=dict)  # task -> its current attempt
    tries: dict = field(default_factory=dict)     # index -> worker deaths it went through
    ended: set = field(default_factory=set)       # tasks gone for good
    finished: int = 0

    def __post_init__(self) -> None:
        self.waiting.extend(range(self.total))

    def take(self, task: int, attempt: str, want: int) -> tuple[list[int], list[int]]:
        """(indices handed to `task`, indices lost because their tries ran out)."""
        lost = []
        if self.attempts.get(task) != attempt:
            if task in self.attempts:
                lost = self._release(task)
            self.attempts[task] = attempt
            self.ended.discard(task)
        live = max(self.tasks - len(self.ended), 1)
        share = max(1, len(self.waiting) // (2 * live))
        given = []
        while self.waiting and len(given) < min(want, share):
            index = self.waiting.popleft()
            self.held[index] = (task, attempt)
            given.append(index)
        return given, lost

    def report(self, task: int, attempt: str, indices: list[int]) -> list[int]:
        """The indices whose results count (held by this very attempt)."""
        counted = [i for i in indices if self.held.get(i) == (task, attempt)]
        for i in counted:
            del self.held[i]
        self.finished += len(counted)
        return counted

    def task_ended(self, task: int) -> list[int]:
        """Indices lost because `task` ended with items out."""
        self.ended.add(task)
        return self._release(task)

    def _release(self, task: int) -> list[int]:
        mine = sorted(i for i, (t, _) in self.held.items() if t == task)
        lost = []
        for i in reversed(mine):  # back to the front, in input order
            del self.held[i]
            self.tries[i] = self.tries.get(i, 0) + 1
            if self.tries[i] > self.retries:
                lost.append(i)
            else:
                self.waiting.appendleft(i)
        self.finished += len(lost)
        return sorted(lost)

    @property
    def done(self) -> bool:
        return self.finished >= self.total

    @property
    def all_tasks_ended(self) -> bool:
        return len(self.ended) >= self.tasks
