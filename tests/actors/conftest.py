"""Fixtures for actor-tier tests."""

from __future__ import annotations

import pytest

from iris.actors import ClusterContext, Node, NodeConfig, Registry
from iris.actors.registry import REGISTRY_KEY


@pytest.fixture
def cluster_small_frames():
    """A cluster whose node refuses frames over 1 MiB."""
    node = Node(NodeConfig(max_frame_bytes=1 << 20)).start()
    node.host(REGISTRY_KEY, Registry)
    with ClusterContext(node, node.address, owns_node=True) as ctx:
        yield ctx
