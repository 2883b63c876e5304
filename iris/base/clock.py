"""The one place Iris reads time: a real clock and a fake one tests advance by hand.

Code never calls time.time(), time.sleep() or datetime.now() directly; it is handed a
Clock. Durations are float seconds named `*_s`; deadlines are monotonic seconds.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for deadlines and leases)."""

    def wall(self) -> float:
        """Seconds since the epoch (for timestamps people read)."""

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for `seconds`."""


class SystemClock:
    """The real clock."""

    # The C function itself, not a method around it: read on every actor call (a Python
    # frame less each time).
    monotonic = time.monotonic

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that moves only when a test calls `advance`.

    `sleep` blocks until another thread advances past the wake-up time, so code under test
    that sleeps can be driven step by step without real waiting.
    """

    def __init__(self, start: float = 1_000.0, wall_offset: float = 1_700_000_000.0):
        self._now = start
        self._wall_offset = wall_offset
        self._cond = threading.Condition()
        self._sleepers: list[float] = []

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {seconds})")
        with self._cond:
            self._now += seconds
            self._cond.notify_all()

    def sleep(self, seconds: float) -> None:
        wake_at = self._now + seconds
        with self._cond:
            heapq.heappush(self._sleepers, wake_at)
            while self._now < wake_at:
                self._cond.wait()
            self._sleepers.remove(wake_at)

    def sleepers(self) -> int:
        """How many threads are blocked in sleep (lets a test wait until code is parked)."""
        with self._cond:
            return len(self._sleepers)


SYSTEM_CLOCK = SystemClock()
