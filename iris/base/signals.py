"""Waiting, on the main thread, for an event that a signal handler sets (SIGTERM, SIGINT).

Not the handlers themselves (each entry point installs its own). Python runs a signal's
handler only on the main thread, between bytecodes. The kernel hands a process's signal to
its main thread only when that thread has no other signal pending; otherwise to another
thread, where Python's C-level handler only trips a flag for the main thread. A main thread
asleep in one unbounded wait (`Event.wait()`, a lock) is woken only by a signal delivered to
itself, so it never runs the handler: a worker outlived its SIGTERM until a second one (seen
in CI; the other signal was the SIGCHLD of a child being stopped, queued because the thread
that had just started it had signals blocked, as glibc does while it starts a thread or a
process). Waiting in slices runs a tripped handler within a slice, at ~2 wakeups a second.
"""

from __future__ import annotations

import threading

SLICE_S = 0.5


def wait_for(event: threading.Event) -> None:
    """Return once `event` is set, running any signal handler tripped meanwhile within
    SLICE_S (call it on the main thread; elsewhere it is a plain wait)."""
    while not event.wait(SLICE_S):
        pass


__all__ = ["SLICE_S", "wait_for"]
