"""An actor class as declared: `@iris.actor` (its public methods, sync or async, and its
concurrency), `@requires` (the roles allowed to call a method) and the `ActorSpec` they
leave on the class (`spec_of`).

Not one live instance (hosting.py serves it under a name, on its own thread, and refuses
a call whose role the spec does not name).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from iris.actors.current import context

# Methods of the class that are hooks (run by the host, hosting.py), not callable remotely.
_HOOKS = ("on_start", "on_stop", "on_tick")


@dataclass(frozen=True)
class ActorSpec:
    cls: type
    methods: dict[str, bool]  # public method name -> is it `async def`
    max_concurrency: int | None
    roles: dict[str, frozenset[str]]  # method -> roles allowed to call it (absent: anyone)
    # method -> (batch handler, check) for methods marked @batched (batching.py)
    batches: dict[str, tuple[str, Any]] = field(default_factory=dict)


# Roles a call can carry (docs/protocol.md, Roles). "internal" is a call from this very
# process (delivered in process, never over a socket) and may call anything.
INTERNAL = "internal"


def requires(*roles: str):
    """Method decorator: only callers holding one of `roles` may call it; the rest get
    PermissionDeniedError and nothing runs. `@requires()` means in-process callers only."""
    def mark(fn):
        fn.__iris_roles__ = frozenset(roles)
        return fn
    return mark


def actor(cls: type | None = None, *, max_concurrency: int | None = None):
    """Class decorator: `@iris.actor` or `@iris.actor(max_concurrency=64)`.

    Adds `Cls.serve(name, *args, **kwargs)`; the class otherwise stays an ordinary class.
    """

    def wrap(target: type) -> type:
        if not isinstance(target, type):
            raise TypeError(f"@iris.actor decorates a class, not {target!r}")
        methods = {
            name: inspect.iscoroutinefunction(member)
            for name, member in inspect.getmembers(target, callable)
            if not name.startswith("_") and name not in _HOOKS
            and not isinstance(inspect.getattr_static(target, name), staticmethod | classmethod)
        }
        roles = {name: getattr(getattr(target, name), "__iris_roles__", None)
                 for name in methods}
        batches = {name: getattr(getattr(target, name), "__iris_batch__", None)
                   for name, is_async in methods.items() if not is_async}
        target.__iris_actor__ = ActorSpec(target, methods, max_concurrency,
                                          {n: r for n, r in roles.items() if r is not None},
                                          {n: b for n, b in batches.items() if b is not None})
        target.serve = classmethod(_serve)
        return target

    return wrap(cls) if cls is not None else wrap


def _serve(cls: type, name: str, *args: Any, **kwargs: Any):
    return context().serve(cls, name, *args, **kwargs)


def spec_of(cls: type) -> ActorSpec:
    spec = getattr(cls, "__iris_actor__", None)
    if not isinstance(spec, ActorSpec) or spec.cls is not cls:
        raise TypeError(f"{cls.__qualname__} is not an actor class: decorate it with @iris.actor")
    return spec
