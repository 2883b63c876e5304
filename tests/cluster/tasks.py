"""Task functions the cluster tests submit (shipped to workers by value)."""

from __future__ import annotations

import os
import time


def hold_until(path: str) -> str:
    """Keep the task (and its host) running until the test creates `path` (bounded: 300 s);
    returns the task's index."""
    deadline = time.monotonic() + 300
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.environ.get("IRIS_TASK_INDEX", "")
