"""Well-known actor keys: where each cluster role's actor lives inside its node.

Not the registry's names for user actors. Kept in the actors layer because every role
(controller, workers, regions, clients) must agree on them and may import nothing above
its own layer.
"""

from __future__ import annotations

from iris.actors.registry import REGISTRY_KEY

CONTROLLER_KEY = "/iris/controller"
INSPECT_KEY = "/iris/inspect"  # the controller's inspector: stacks, profiles, exec, ports
WORKER_KEY_PREFIX = "/iris/workers/"
REGION_KEY_PREFIX = "/iris/regions/"
INSPECT_SUFFIX = "/inspect"  # a worker's inspector: worker_key(id) + this


def worker_key(worker_id: str) -> str:
    return WORKER_KEY_PREFIX + worker_id


def worker_inspect_key(worker_id: str) -> str:
    """The inspector beside a worker (its attempts' stacks, profiles, exec sessions)."""
    return WORKER_KEY_PREFIX + worker_id + INSPECT_SUFFIX


def region_key(region: str) -> str:
    return REGION_KEY_PREFIX + region


__all__ = ["CONTROLLER_KEY", "INSPECT_KEY", "INSPECT_SUFFIX", "REGION_KEY_PREFIX", "REGISTRY_KEY",
           "WORKER_KEY_PREFIX", "region_key", "worker_inspect_key", "worker_key"]
