"""Fixtures for cluster-tier tests: local clusters with real worker processes."""

from __future__ import annotations

import pytest

import iris
from tests.conftest import as_current


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """Two workers shared by the non-destructive tests of a module. They offer 8 CPUs each,
    more than this machine has, on purpose: the tests run many small tasks at once."""
    with iris.local_cluster(workers=2, state_dir=tmp_path_factory.mktemp("cluster"),
                            stop_grace_s=2.0, worker_cpu=8) as ctx:
        yield ctx


@pytest.fixture
def jobs_cluster(shared_cluster):
    """Make the shared cluster current for this test (fixtures may run in another context)."""
    with as_current(shared_cluster):
        yield shared_cluster
