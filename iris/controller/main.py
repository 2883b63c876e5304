"""`iris controller serve`: host the registry and the controller in one process until stopped."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from iris.actors import ClusterContext, Node, NodeConfig, Registry, Security
from iris.actors.registry import REGISTRY_KEY
from iris.controller.actor import CONTROLLER_KEY, Controller
from iris.controller.service import ControllerConfig


def host_controller(node: Node, config: ControllerConfig) -> None:
    """Serve the registry and the controller in `node` (the cluster's address is its address)."""
    node.host(REGISTRY_KEY, Registry)
    node.host(CONTROLLER_KEY, Controller, (config, node))


def run_controller(state_dir: Path, *, bind: str = "tcp://127.0.0.1:0",
                   keys_dir: str | None = None, stop: threading.Event | None = None,
                   worker_dead_after_s: float | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    security = Security.load(keys_dir) if keys_dir else None
    node = Node(NodeConfig(bind=bind), security=security).start()
    extra = {} if worker_dead_after_s is None else {"worker_dead_after_s": worker_dead_after_s}
    try:
        host_controller(node, ControllerConfig(state_dir=Path(state_dir), **extra))
        ctx = ClusterContext(node, node.address, owns_node=True)
        print(f"controller serving at {node.address} (state in {state_dir})", flush=True)
        (stop or threading.Event()).wait()
        ctx.close()
    finally:
        node.stop()
