"""Fixtures for cluster-tier tests: local clusters with real worker processes."""

from __future__ import annotations

import threading

import pytest

import iris


@pytest.fixture
def wait_until():
    """wait(predicate, timeout_s=120, what=...) -> the predicate's first truthy value.

    Polls every 50 ms, bounded: the things waited for here are other processes' files and
    the controller's state, which offer no event to wait on from the test."""

    def wait(predicate, timeout_s: float = 120.0, what: str = "condition"):
        gate = threading.Event()
        for _ in range(int(timeout_s / 0.05)):
            value = predicate()
            if value:
                return value
            gate.wait(0.05)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

    return wait


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """Two workers shared by the non-destructive tests of a module."""
    with iris.local_cluster(workers=2, state_dir=tmp_path_factory.mktemp("cluster"),
                            stop_grace_s=2.0) as ctx:
        yield ctx


@pytest.fixture
def jobs_cluster(shared_cluster):
    """Make the shared cluster current for this test (fixtures may run in another context)."""
    from iris.actors.current import current_context

    token = current_context.set(shared_cluster)
    yield shared_cluster
    current_context.reset(token)
