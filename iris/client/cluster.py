"""Joining or starting a cluster: `iris.local_cluster()` and `iris.connect()`.

Not the runtime (iris.actors). Both return a ClusterContext and make it current. The local
cluster hosts the registry in this process; later it also runs the controller, a region
and worker processes (issues 3 and 4).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from iris.actors import ClusterContext, Node, NodeConfig, Registry, Security
from iris.actors.current import current_context
from iris.actors.registry import REGISTRY_KEY
from iris.base.errors import ConfigError, InvalidRequestError

ENV_ADDRESS = "IRIS_ADDRESS"
ENV_KEYS_DIR = "IRIS_KEYS_DIR"
ENV_BIND = "IRIS_BIND"
ENV_NAMESPACE = "IRIS_NAMESPACE"


def _security_from_env(security: Security | None) -> Security | None:
    if security is not None:
        return security
    keys = os.environ.get(ENV_KEYS_DIR)
    return Security.load(keys) if keys else None


@contextmanager
def local_cluster(workers: int = 0, *, bind: str = "tcp://127.0.0.1:0",
                  security: Security | None = None) -> Iterator[ClusterContext]:
    """An embedded cluster on this machine, current inside the `with` block."""
    if workers != 0:
        raise InvalidRequestError(
            "workers: this build runs the registry only; local worker processes are not "
            "available yet (use workers=0)", "workers")
    node = Node(NodeConfig(bind=bind), security=_security_from_env(security)).start()
    try:
        node.host(REGISTRY_KEY, Registry)
        ctx = ClusterContext(node, node.address, owns_node=True)
    except BaseException:
        node.stop()
        raise
    with ctx:
        yield ctx


def connect(address: str | None = None, *, namespace: str | None = None,
            bind: str | None = None, security: Security | None = None) -> ClusterContext:
    """Join the cluster at `address` (default: $IRIS_ADDRESS) and make it current.

    Usable as a context manager, which leaves the cluster at the end of the block.
    """
    address = address or os.environ.get(ENV_ADDRESS)
    if not address:
        raise ConfigError(f"no cluster address: pass one or set ${ENV_ADDRESS}")
    bind = bind or os.environ.get(ENV_BIND) or "tcp://127.0.0.1:0"
    node = Node(NodeConfig(bind=bind), security=_security_from_env(security)).start()
    ctx = ClusterContext(node, address, namespace or os.environ.get(ENV_NAMESPACE) or "/",
                         owns_node=True)
    current_context.set(ctx)
    return ctx
