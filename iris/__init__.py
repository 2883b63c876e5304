"""Iris: actors and jobs on preemptible accelerator fleets, over ZeroMQ.

    @iris.actor
    class Trainer: ...

    with iris.local_cluster() as cluster:
        ref = Trainer.serve("trainer", 1e-3)
        iris.resolve("trainer").get_weights().result()
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
)
from iris.base.resources import Resources
from iris.client import connect, list_actors, local_cluster, resolve, resolve_all
from iris.client.jobs import JobHandle, spawn, submit
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
    "UnschedulableError",
    "JobHandle", "Security", "actor", "connect", "current", "errors", "generate_keys",
    "list_actors", "local_cluster", "on_preempt", "resolve", "resolve_all", "spawn", "submit",
    "weights",
]
