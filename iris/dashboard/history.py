"""The charts strip's data: running tasks and chips in use, sampled over the last hour.

Pure: a bounded ring of samples, and what one controller snapshot counts. Not the sampler
(server.py reads a snapshot every SAMPLE_EVERY_S and appends here) and not the page.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

SAMPLE_EVERY_S = 10.0
"""One point per 10 s: 360 points draw an hour at one point per 2 pixels of a 720 px strip,
and cost the controller one snapshot read (~ms) every 10 s."""
WINDOW_S = 3600.0


def count(snapshot: Mapping[str, Any]) -> dict[str, int]:
    """Tasks running and accelerator chips held by them, from one controller snapshot: a
    worker's chips count as in use while it runs anything (a TPU host is used whole)."""
    running = chips = 0
    for w in snapshot.get("workers", ()):
        n = len(w.get("attempts", ()))
        running += n
        if n:
            chips += int(w.get("accelerators") or 0)
    return {"running_tasks": running, "chips_in_use": chips}


class History:
    """The last WINDOW_S of samples, oldest first. `at` is wall-clock epoch seconds."""

    def __init__(self, window_s: float = WINDOW_S, every_s: float = SAMPLE_EVERY_S):
        self.window_s = window_s
        self.every_s = every_s
        self._points: deque[dict[str, float]] = deque(maxlen=int(window_s / every_s) + 1)

    def add(self, at: float, snapshot: Mapping[str, Any]) -> None:
        self._points.append({"at": at, **count(snapshot)})

    def view(self, now: float, current: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The window's points, oldest first; `current`: a snapshot counted as a last point
        at `now` (not stored)."""
        points = [p for p in self._points if p["at"] >= now - self.window_s]
        if current is not None:
            points.append({"at": now, **count(current)})
        return {"window_s": self.window_s, "every_s": self.every_s, "now": now,
                "points": points}
