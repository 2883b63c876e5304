"""Layer 3: nodes, actor hosting, refs and futures, the registry, CURVE security."""

from iris.actors.actor_spec import actor
from iris.actors.config import BulkConfig, NodeConfig
from iris.actors.context import ClusterContext, current
from iris.actors.future import ActorFuture
from iris.actors.node import Node
from iris.actors.refs import ActorGroup, ActorRef
from iris.actors.registry import REGISTRY_KEY, Registry
from iris.actors.security import Security, generate_keys

__all__ = ["ActorFuture", "ActorGroup", "ActorRef", "BulkConfig", "ClusterContext", "Node",
           "NodeConfig", "REGISTRY_KEY", "Registry", "Security", "actor", "current",
           "generate_keys"]
