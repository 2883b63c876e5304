"""The controller's clock, read once per turn: every request of ControllerService (and the
tick) sees one `now`, so everything one turn decides is decided at the same instant.

`@turn` marks a request; `now_wall(svc)` / `now_mono(svc)` give that turn's reading (a
request inside another shares the outer one's). Outside any turn (a helper called on its
own) they read the clock. Not for durations that are measured (a pass's own timing).

`PassLater`: when a scheduling pass asked for by a turn waits for the end of the shell's
queue, so that one pass serves every turn of a burst.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def turn(method: Callable) -> Callable:
    @functools.wraps(method)
    def in_turn(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._turn_now is not None:
            return method(self, *args, **kwargs)
        self._turn_now = (self.clock.wall(), self.clock.monotonic())
        try:
            return method(self, *args, **kwargs)
        finally:
            self._turn_now = None
    return in_turn


def now_wall(svc: Any) -> float:
    return svc._turn_now[0] if svc._turn_now is not None else svc.clock.wall()


def now_mono(svc: Any) -> float:
    return svc._turn_now[1] if svc._turn_now is not None else svc.clock.monotonic()


# The longest a pass asked for `later` waits for the shell's queue to run dry.
MAX_DEFER_S = 0.25


class PassLater:
    """Whether a pass may wait for the end of the shell's queue. `queued()` (set by the
    shell: more requests wait in its mailbox) says there is an end to wait for; `wanted`
    says a pass waits for it (the shell then runs it: ControllerService.schedule_now). A
    pass waits at most MAX_DEFER_S, so a queue that never runs dry still places."""

    def __init__(self) -> None:
        self.queued: Callable[[], bool] = lambda: False
        self.wanted = False
        self._since: float | None = None

    def wait(self, now: float) -> bool:
        """True: leave the pass for later (now `wanted`); False: run it now."""
        if not self.queued():
            return False
        if self._since is None:
            self._since = now
        if now - self._since >= MAX_DEFER_S:
            return False
        self.wanted = True
        return True

    def ran(self) -> None:
        self.wanted, self._since = False, None
