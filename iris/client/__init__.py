"""Layer 5: what user code calls — joining clusters, resolving actors (jobs arrive later)."""

from iris.client.api import list_actors, resolve, resolve_all
from iris.client.cluster import connect, local_cluster

__all__ = ["connect", "list_actors", "local_cluster", "resolve", "resolve_all"]
