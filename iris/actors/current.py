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
# How a task process joins its cluster ($IRIS_ADDRESS) on first use: context.join, set by
# context.py when it is imported (iris.actors imports it, so it always is before use).
_joiners: list[Callable[[], Any]] = []


def set_joiner(join: Callable[[], Any]) -> None:
    _joiners[:] = [join]


def context() -> Any:
    """The current ClusterContext; inside a task, joins the task's cluster on first use."""
    ctx = current_context.get()
    if ctx is None and _joiners and os.environ.get("IRIS_JOB_ID") \
            and os.environ.get("IRIS_ADDRESS"):
        ctx = _joiners[0]()
        current_context.set(ctx)
    if ctx is None:
        raise IrisError("no Iris cluster here: use `with iris.local_cluster():` or iris.connect()")
    return ctx
