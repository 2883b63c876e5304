"""The verbs users call on the current cluster: resolve, resolve_all, list_actors."""

from __future__ import annotations

from iris.actors import ActorGroup, ActorRef, current
from iris.client import checks


def resolve(name: str, timeout: float = 30.0) -> ActorRef:
    """A ref to the actor registered as `name`, waiting up to `timeout` s for it."""
    return current().resolve(checks.name(name), checks.wait_s(timeout))


def resolve_all(name: str, timeout: float = 0.0) -> ActorGroup:
    """Every live replica registered as `name`."""
    return current().resolve_all(checks.name(name), checks.wait_s(timeout))


def list_actors(prefix: str = "/") -> list[dict]:
    return current().list_actors(prefix)
