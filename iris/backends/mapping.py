"""`iris.map`'s front, the same on every backend: checks, order, failures, progress.

Not how items run (each backend's `map_stream` does that, and cancels what is left when
its generator is closed). A backend streams `(index, ok, value)` as items finish, with
`value` the item's result or its exception (own type, `remote_traceback`). This module
checks the arguments before anything is submitted, puts results in input order (or not),
annotates the first failure with its input's index, and cancels the rest on it unless told
otherwise.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from iris.backends.common import check_picklable
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import InvalidRequestError
from iris.base.resources import Resources


@dataclass(frozen=True)
class MapOptions:
    """What a backend needs of a map. `max_parallel`: at most this many items at once
    (None: the backend's default). `retries`: how often an item is tried again when its
    worker dies (preemption, kill), not when it raises."""

    resources: Resources
    max_parallel: int | None
    retries: int
    name: str
    env: dict | None = None   # the job's environment variables (Iris, Ray)
    pip: tuple = ()           # the job's requirements (Iris, Ray; in process: this interpreter)


def check(fn: Any, inputs: Any, resources: Any, max_parallel: Any, retries: Any) -> list:
    """The inputs as a list, or InvalidRequestError naming the argument; nothing is sent."""
    if not callable(fn):
        raise InvalidRequestError(f"fn: expected a callable, got {type(fn).__name__}", "fn")
    if isinstance(inputs, str | bytes) or not isinstance(inputs, Iterable):
        raise InvalidRequestError(f"inputs: expected an iterable of inputs, got "
                                  f"{type(inputs).__name__}", "inputs")
    if resources is not None and not isinstance(resources, Resources):
        raise InvalidRequestError("resources: expected iris.Resources(...)", "resources")
    if max_parallel is not None and (isinstance(max_parallel, bool) or not isinstance(
            max_parallel, int) or max_parallel < 1):
        raise InvalidRequestError(f"max_parallel: expected an int >= 1, got {max_parallel!r}",
                                  "max_parallel")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidRequestError(f"retries: expected an int >= 0, got {retries!r}", "retries")
    items = list(inputs)
    check_picklable({"fn": fn})
    try:
        check_picklable({"inputs": items})
    except Exception:
        check_picklable({f"inputs[{i}]": item for i, item in enumerate(items)})
        raise
    return items


def run(stream: Iterator[tuple[int, bool, Any]], total: int, *, ordered: bool,
        cancel_on_failure: bool, return_exceptions: bool,
        progress: bool | None) -> Iterator[tuple[int, Any]]:
    """(index, value) from `stream`, in input order if `ordered`, failures handled."""
    bar = Progress(total, sys.stderr) if _want_progress(progress) else None
    pending: dict[int, Any] = {}
    next_index, failures = 0, []
    try:
        for index, ok, value in stream:
            if bar is not None:
                bar.advance()
            if not ok:
                annotate(value, index, total)
                if not return_exceptions:
                    if cancel_on_failure:
                        raise value
                    failures.append((index, value))
                    continue
            if not ordered:
                yield index, value
                continue
            pending[index] = value
            while next_index in pending:
                yield next_index, pending.pop(next_index)
                next_index += 1
        if failures:
            index, first = min(failures, key=lambda f: f[0])
            first.add_note(f"{len(failures)} of {total} inputs failed: indices "
                           f"{sorted(i for i, _ in failures)[:20]}")
            raise first
        if ordered:  # inputs that failed (return_exceptions=False) leave holes: fill none
            yield from sorted(pending.items())
    finally:
        stream.close()  # cancels what is left (the backend's generator cleans up)
        if bar is not None:
            bar.close()


def annotate(exc: BaseException, index: int, total: int) -> None:
    try:
        exc.map_index = index
    except AttributeError:
        pass
    exc.add_note(f"iris.map: input {index} (of {total}) failed")


def _want_progress(progress: bool | None) -> bool:
    if progress is not None:
        return bool(progress)
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A one-line progress bar on a terminal: done/total, rate, time left.

    Thirty lines instead of tqdm or rich: neither is an Iris dependency, and a bar that
    redraws at most 10 times a second is all a map needs. Drawn only on a TTY (or when
    asked with progress=True), so logs and CI output stay clean.
    """

    _WIDTH = 30
    _EVERY_S = 0.1

    def __init__(self, total: int, out: TextIO, clock: Callable[[], float] | None = None):
        self.total, self.done = total, 0
        self._out = out
        self._clock = clock or SYSTEM_CLOCK.monotonic
        self._start = self._last = self._clock()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = self._clock()
        if now - self._last >= self._EVERY_S or self.done >= self.total:
            self._last = now
            self._out.write("\r" + self.line(now))
            self._out.flush()

    def line(self, now: float) -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self._WIDTH)
        rate = self.done / max(now - self._start, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else math.inf
        eta = f"{left:.0f}s left" if math.isfinite(left) else "--"
        return (f"iris.map [{'#' * filled}{'.' * (self._WIDTH - filled)}] "
                f"{self.done}/{self.total} {rate:,.0f}/s {eta}")

    def close(self) -> None:
        self._out.write("\n")
        self._out.flush()
