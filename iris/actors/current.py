"""The current cluster context: a ContextVar, never a module global value.

Not the context itself (context.py); this module sits below hosting, refs and context so
all of them reach the current context without importing each other (and without imports
inside functions). context.py registers how a task joins its cluster on first use.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable
from typing import Any

from iris.base.errors import IrisError

current_context: contextvars.ContextVar[Any] = contextvars.ContextVar("iris_context",
                                                                      default=None)
# What a thread with no context uses, found on first use: context.py's joins a task's
# cluster ($IRIS_ADDRESS), and iris.backends (imported by `import iris`) replaces it with one
# that also reads $IRIS_BACKEND. It returns None when the environment names nothing.
_joiners: list[Callable[[], Any]] = []


def set_joiner(join: Callable[[], Any]) -> None:
    _joiners[:] = [join]


def context() -> Any:
    """The current context; with none set, what the environment names (inside a task, the
    task's cluster; else $IRIS_BACKEND), joined on first use."""
    ctx = current_context.get()
    if ctx is None and _joiners:
        ctx = _joiners[0]()
        if ctx is not None:
            current_context.set(ctx)
    if ctx is None:
        raise IrisError("no Iris cluster here: use `with iris.local_cluster():`, "
                        "iris.connect(), `with iris.backend('inprocess'):` or set IRIS_BACKEND")
    return ctx


def in_task() -> bool:
    """Whether this process is an Iris task (its worker set these two)."""
    return bool(os.environ.get("IRIS_JOB_ID") and os.environ.get("IRIS_ADDRESS"))
