"""Iris: actors and jobs on preemptible accelerator fleets, over ZeroMQ.

    @iris.actor
    class Trainer: ...

    with iris.local_cluster() as cluster:       # or iris.backend("inprocess" | "ray")
        ref = Trainer.serve("trainer", 1e-3)
        iris.resolve("trainer").get_weights().result()
        iris.map(square, range(100))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from iris.base import errors
from iris.base.errors import (
    ActorCallError,
    ActorDiedError,
    ActorNotFoundError,
    BadArgumentsError,
    ConflictError,
    DeadlineExceededError,
    InvalidRequestError,
    IrisError,
    JobFailedError,
    MethodNotFoundError,
    NotFoundError,
    PeerUnavailableError,
    PermissionDeniedError,
    RemoteError,
    UnschedulableError,
    WorkerLostError,
)

if TYPE_CHECKING:
    from iris.actors import (
        ActorFuture,
        ActorGroup,
        ActorRef,
        BulkConfig,
        ClusterContext,
        NodeConfig,
        Security,
        actor,
        current,
        generate_keys,
        weights,
    )
    from iris.backends import (
        ObjectRef,
        TaskInfo,
        backend,
        backend_kind,
        free,
        get,
        list_actors,
        map,
        map_unordered,
        put,
        resolve,
        resolve_all,
        spawn,
        spawn_job,
        submit,
        task_info,
        wait,
    )
    from iris.base.resources import Resources
    from iris.client import connect, local_cluster
    from iris.client.jobs import JobHandle
    from iris.worker.task_runtime import on_preempt

# The rest of the API is imported on first use (PEP 562): every process Iris starts imports
# `iris` as the parent of what it runs (a worker's watchdog, a zygote, `iris controller
# serve`, each CLI command), and most need neither the backends nor the client; eagerly
# they cost ~0.2 CPU-s each, hundreds of times per test run (tests/README.md, round 4).
_LAZY = {
    "ActorFuture": "iris.actors",
    "ActorGroup": "iris.actors",
    "ActorRef": "iris.actors",
    "BulkConfig": "iris.actors",
    "ClusterContext": "iris.actors",
    "NodeConfig": "iris.actors",
    "Security": "iris.actors",
    "actor": "iris.actors",
    "current": "iris.actors",
    "generate_keys": "iris.actors",
    "weights": "iris.actors.weights",  # a module
    "ObjectRef": "iris.backends",
    "TaskInfo": "iris.backends",
    "backend": "iris.backends",
    "backend_kind": "iris.backends",
    "free": "iris.backends",
    "get": "iris.backends",
    "list_actors": "iris.backends",
    "map": "iris.backends",
    "map_unordered": "iris.backends",
    "put": "iris.backends",
    "resolve": "iris.backends",
    "resolve_all": "iris.backends",
    "spawn": "iris.backends",
    "spawn_job": "iris.backends",
    "submit": "iris.backends",
    "task_info": "iris.backends",
    "wait": "iris.backends",
    "Resources": "iris.base.resources",
    "connect": "iris.client",
    "local_cluster": "iris.client",
    "JobHandle": "iris.client.jobs",
    "on_preempt": "iris.worker.task_runtime",
}


def __getattr__(name: str):
    if name == "__version__":
        import importlib.metadata as metadata
        try:
            value = metadata.version("iris")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            value = "0+unknown"
    elif name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        value = module if module.__name__.endswith("." + name) else getattr(module, name)
    else:
        raise AttributeError(f"module 'iris' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"__version__"})


__all__ = [
    "ActorCallError", "ActorDiedError", "ActorFuture", "ActorGroup", "ActorNotFoundError",
    "ActorRef", "BadArgumentsError", "BulkConfig", "ClusterContext", "ConflictError",
    "DeadlineExceededError", "IrisError",
    "InvalidRequestError", "JobFailedError", "MethodNotFoundError", "NodeConfig", "NotFoundError",
    "PeerUnavailableError", "PermissionDeniedError", "RemoteError", "Resources",
    "UnschedulableError", "WorkerLostError",
    "JobHandle", "ObjectRef", "Security", "TaskInfo", "actor", "backend", "backend_kind",
    "connect", "current", "errors", "free", "generate_keys", "get", "list_actors",
    "local_cluster", "map", "map_unordered", "on_preempt", "put", "resolve", "resolve_all",
    "spawn", "spawn_job", "submit", "task_info", "wait", "weights",
]
