"""Iris: actors and jobs on preemptible accelerator fleets, over ZeroMQ.

    @iris.actor
    class Trainer: ...

    with iris.local_cluster() as cluster:       # or iris.backend("inprocess" | "ray")
        ref = Trainer.serve("trainer", 1e-3)
        iris.resolve("trainer").get_weights().result()
        iris.map(square, range(100))
"""

import importlib.metadata as _metadata

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
from iris.base import errors
from iris.base.errors import (
    ActorCallError,
    ActorDiedError,
    ActorNotFoundError,
    BadArgumentsError,
    DeadlineExceededError,
    InvalidRequestError,
    IrisError,
    JobFailedError,
    MethodNotFoundError,
    PeerUnavailableError,
    PermissionDeniedError,
    RemoteError,
    UnschedulableError,
    WorkerLostError,
)
from iris.base.resources import Resources
from iris.client import connect, local_cluster
from iris.client.jobs import JobHandle
from iris.worker.task_runtime import on_preempt

try:
    __version__ = _metadata.version("iris")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ActorCallError", "ActorDiedError", "ActorFuture", "ActorGroup", "ActorNotFoundError",
    "ActorRef", "BadArgumentsError", "BulkConfig", "ClusterContext", "DeadlineExceededError", "IrisError",
    "InvalidRequestError", "JobFailedError", "MethodNotFoundError", "NodeConfig",
    "PeerUnavailableError", "PermissionDeniedError", "RemoteError", "Resources",
    "UnschedulableError", "WorkerLostError",
    "JobHandle", "ObjectRef", "Security", "TaskInfo", "actor", "backend", "backend_kind",
    "connect", "current", "errors", "free", "generate_keys", "get", "list_actors",
    "local_cluster", "map", "map_unordered", "on_preempt", "put", "resolve", "resolve_all",
    "spawn", "spawn_job", "submit", "task_info", "wait", "weights",
]
