"""Fixtures for actor-tier tests."""

from __future__ import annotations

import pytest
import zmq

from iris.actors import ClusterContext, Node, NodeConfig, Registry
from iris.actors.registry import REGISTRY_KEY


@pytest.fixture
def cluster_small_frames():
    """A cluster whose node refuses frames over 1 MiB."""
    node = Node(NodeConfig(max_frame_bytes=1 << 20)).start()
    node.host(REGISTRY_KEY, Registry)
    with ClusterContext(node, node.address, owns_node=True) as ctx:
        yield ctx


@pytest.fixture
def mute_peer():
    """A bare ROUTER that takes calls and answers only what the test sends on it: (its
    address, the socket)."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        yield f"tcp://127.0.0.1:{port}", router
    finally:
        router.close(linger=0)
        ctx.term()
