"""The controller's clock, read once per turn: every request of ControllerService (and the
tick) sees one `now`, so everything one turn decides is decided at the same instant.

`@turn` marks a request; `now_wall(svc)` / `now_mono(svc)` give that turn's reading (a
request inside another shares the outer one's). Outside any turn (a helper called on its
own) they read the clock. Not for durations that are measured (a pass's own timing).
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
