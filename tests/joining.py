"""Speaking to a controller as a worker does: join with the cluster token, then use the
credential it hands back (controller/credentials.py)."""

from __future__ import annotations

from pathlib import Path

from iris.actors import tokens
from iris.actors.keys import CONTROLLER_KEY


def cluster_token(node, address: str) -> bytes:
    state_dir = node.call(address, CONTROLLER_KEY, "state_dir", timeout_s=30).result(60)
    return tokens.read(Path(state_dir) / tokens.CLUSTER_TOKEN_FILE)


def join(node, address: str, worker_id: str) -> dict:
    """{worker_id, credential, command_token} for a (fake) worker `worker_id`."""
    return node.call(address, CONTROLLER_KEY, "join", (worker_id,), timeout_s=30,
                     auth=cluster_token(node, address)).result(60)


def credential(node, address: str, worker_id: str) -> bytes:
    return join(node, address, worker_id)["credential"]
