"""A log budget: at most one line per interval for an event any peer can repeat at will.

Not the logging itself. A refused cast has no caller to answer, so it is logged; a peer
sending thousands a second (no token, a wrong method) made one warning line each, and a
flood of them filled the disk. Under a budget the first line goes out, the rest are counted,
and the next line let through says how many were left out.
"""

from __future__ import annotations

import threading

# One line per this many seconds: a real fault (a caller casting to a method it may not
# call) still shows within seconds, and a flood costs about 8,600 lines a day, not millions.
EVERY_S = 10.0


class LogBudget:
    """Thread-safe (the loop and an actor's thread both refuse casts)."""

    def __init__(self, every_s: float = EVERY_S):
        self._every = every_s
        self._next = float("-inf")
        self._skipped = 0
        self._lock = threading.Lock()

    def take(self, now: float) -> int | None:
        """None: leave this line out (counted). Else log it, with the count returned: how
        many lines were left out since the last one."""
        with self._lock:
            if now < self._next:
                self._skipped += 1
                return None
            self._next = now + self._every
            skipped, self._skipped = self._skipped, 0
            return skipped


def left_out(skipped: int) -> str:
    """The tail of a line let through: how many like it were left out before it."""
    return f" (and {skipped} more like it left out of the log)" if skipped else ""
