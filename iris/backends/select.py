"""Which backend runs `iris.*`: the context manager `iris.backend(spec)` and $IRIS_BACKEND.

Not a backend itself. A backend is a context object (in process, an Iris cluster, a Ray
cluster) held in the one ContextVar `iris.actors.current.current_context`, so nested `with`
blocks and tests swap it, and threads and tasks a backend starts inherit it. Specs:

    inprocess                threads in this process (no sockets, no controller)
    inprocess+process        the same, but each task in a child process of its own
    ray                      a local Ray head (started here if none is running)
    ray://HOST:PORT          the Ray cluster whose GCS listens there (`ray start --head`)
    tcp://HOST:PORT          the Iris cluster there (as iris.connect)

Precedence, first that applies: the innermost `with` (iris.backend, iris.local_cluster,
iris.connect); inside an Iris task, the task's own cluster (so a developer's IRIS_BACKEND
leaking through a worker's environment never redirects a task); $IRIS_BACKEND; else
nothing, and `iris.submit`/`spawn`/`map` start an embedded local cluster as before.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from iris.actors.context import join_task
from iris.actors.current import current_context, set_joiner
from iris.base.errors import ConfigError, IrisError

ENV = "IRIS_BACKEND"
_KINDS = ("inprocess", "inprocess+process", "ray", "ray://HOST:PORT", "tcp://HOST:PORT")


@dataclass(frozen=True)
class Spec:
    """A parsed backend spec: `kind` is inprocess | ray | iris; `address` may be None."""

    kind: str
    address: str | None = None
    isolation: str = "thread"


def parse(spec: str) -> Spec:
    """`spec` as a Spec; a clear ConfigError naming the accepted forms otherwise."""
    text = spec.strip() if isinstance(spec, str) else spec
    if text == "inprocess":
        return Spec("inprocess")
    if text == "inprocess+process":
        return Spec("inprocess", isolation="process")
    if text == "ray":
        return Spec("ray")
    for scheme, kind in (("ray://", "ray"), ("tcp://", "iris")):
        if isinstance(text, str) and text.startswith(scheme) and len(text) > len(scheme):
            rest = text[len(scheme):]
            host, _, port = rest.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"backend {spec!r}: expected {scheme}HOST:PORT")
            return Spec(kind, rest if kind == "ray" else text)
    raise ConfigError(f"backend {spec!r}: expected one of {', '.join(_KINDS)}")


def open_backend(spec: Spec) -> Any:
    """A new context object for `spec` (not made current)."""
    if spec.kind == "inprocess":
        from iris.backends.inprocess.backend import InProcessBackend

        return InProcessBackend(isolation=spec.isolation)
    if spec.kind == "ray":
        from iris.backends.ray.backend import RayBackend

        return RayBackend(spec.address)
    from iris.actors.context import join

    return join(spec.address)


@contextmanager
def backend(spec: str | Any = "inprocess") -> Iterator[Any]:
    """`with iris.backend("inprocess"):` runs the block's `iris.*` calls on that backend.

    `spec` is a string (see the module doc) or a context object (what `iris.local_cluster`
    or another `iris.backend` yielded). A backend opened here is closed at the end of the
    block: its actors stop and its jobs are killed.
    """
    opened = open_backend(parse(spec)) if isinstance(spec, str) else None
    ctx = opened if opened is not None else spec
    token = current_context.set(ctx)
    try:
        yield ctx
    finally:
        current_context.reset(token)
        if opened is not None:
            opened.close()


class _EnvDefault:
    """The backend $IRIS_BACKEND names, one per process and spec.

    Process-wide on purpose: the variable is a process-wide setting, and a thread the
    user starts has an empty context, yet must reach the same in-process registry (or the
    same Ray connection) as the main thread. The one other process-wide choice Iris makes
    this way is a task joining its cluster (actors/current.py).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened: dict[str, Any] = {}

    def __call__(self) -> Any:
        task_ctx = join_task()
        if task_ctx is not None:
            return task_ctx
        raw = os.environ.get(ENV, "").strip()
        if not raw:
            return None
        with self._lock:
            if raw not in self._opened:
                self._opened[raw] = open_backend(parse(raw))
            return self._opened[raw]


def install_default() -> None:
    """Make threads with no context use $IRIS_BACKEND (after a task's own cluster)."""
    set_joiner(_EnvDefault())


def peek() -> Any:
    """The current context if one is set or named by the environment; else None."""
    ctx = current_context.get()
    if ctx is not None:
        return ctx
    from iris.actors.current import context

    try:
        return context()
    except ConfigError:
        raise
    except IrisError:  # nothing set and nothing named: the caller decides what that means
        return None
