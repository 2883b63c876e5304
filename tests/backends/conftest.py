"""Fixtures for the backend suite: one case, three backends (in process, Iris, Ray).

The Iris cluster is shared by a module (two workers of 4 CPUs); Ray is one local head per
session (`ray.init` with 4 logical CPUs, a 100 MB object store, no dashboard), shut down at
the end. Both start without the test's process tag (they outlive the test on purpose;
tests/conftest.py). Ray's tests share one xdist group, so `-n 2 --dist loadgroup` starts
one Ray head per run, not one per worker. Ray's start-up time is printed once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import iris
from iris.actors.current import current_context

_TAG = "IRIS_TEST_PROCESS_TAG"
RAY = pytest.param("ray", marks=pytest.mark.xdist_group("ray"))
BACKENDS = ["inprocess", "iris", RAY]


@contextmanager
def untagged() -> Iterator[None]:
    """Processes started in this block do not count as the current test's."""
    tag = os.environ.pop(_TAG, None)
    try:
        yield
    finally:
        if tag is not None:
            os.environ[_TAG] = tag


@pytest.fixture(scope="module")
def iris_cluster(tmp_path_factory):
    with untagged(), iris.local_cluster(workers=2, worker_cpu=4, stop_grace_s=2.0,
                                        state_dir=tmp_path_factory.mktemp("backends")) as ctx:
        token = current_context.set(None)  # made current per test, by `backend`
        yield ctx
        current_context.reset(token)


@pytest.fixture(scope="session")
def ray_head():
    import ray

    started = time.monotonic()
    with untagged():
        ray.init(num_cpus=4, object_store_memory=100 << 20, include_dashboard=False,
                 log_to_driver=False, namespace="iris",
                 runtime_env={"env_vars": {"IRIS_BACKEND": "ray"}})
    print(f"\n[tests/backends] Ray head started in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    yield ray
    ray.shutdown()


@pytest.fixture(params=BACKENDS)
def backend(request) -> Iterator[str]:
    """The backend named by the parameter, current for the test; yields its kind."""
    kind = request.param
    if kind == "inprocess":
        with iris.backend("inprocess"):
            yield kind
    elif kind == "iris":
        cluster = request.getfixturevalue("iris_cluster")
        token = current_context.set(cluster)
        try:
            yield kind
        finally:
            current_context.reset(token)
    else:
        request.getfixturevalue("ray_head")
        from iris.backends.ray.backend import RayBackend

        with iris.backend(RayBackend()):
            yield kind
