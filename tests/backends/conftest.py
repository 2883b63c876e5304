"""Fixtures for the backend suite: one case, three backends (in process, Iris, Ray).

The Iris cluster is shared by the session (two workers of 4 CPUs); Ray is one local head per
session (`ray.init` with 4 logical CPUs, a 100 MB object store, no dashboard), shut down at
the end. Both start without the test's process tag (they outlive the test on purpose;
tests/conftest.py). Ray's tests share one xdist group, so `-n 2 --dist loadgroup` starts
one Ray head per run, not one per worker. Ray's start-up time is printed once.
"""

from __future__ import annotations

import os
import sys
import threading
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


@pytest.fixture(scope="session")
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
                 log_to_driver=False, namespace="iris")
    print(f"\n[tests/backends] Ray head started in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _no_cluster_from_elsewhere() -> Iterator[None]:
    """Each test starts with no current cluster: a session fixture of another directory that
    ran earlier in this xdist worker (the dashboard's shared cluster) stays current for the
    rest of the session, and these tests are about which backend is current."""
    token = current_context.set(None)
    yield
    current_context.reset(token)


@pytest.fixture(scope="module", autouse=True)
def _needed_backends(request) -> None:
    """Start the shared Iris cluster before any test's own fixtures, so its threads are not
    taken for the first test's leaks, in a module whose tests use it. Not the Ray head: it
    starts no Iris threads and no tagged process, and it starts with the first Ray test, in
    the one xdist worker that runs the "ray" group (started here, it ran in every worker
    that ran any test of a module with Ray tests in it)."""
    wanted = {item.callspec.params.get("backend") for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec")}
    if "iris" in wanted:
        from iris.backends.iris.backend import IrisBackend

        IrisBackend(request.getfixturevalue("iris_cluster")).put(None)  # its object holder


@pytest.fixture(params=BACKENDS)
def backend(request) -> Iterator[str]:
    """The backend named by the parameter, current for the test; yields its kind. Jobs and
    actors a test leaves running on a shared backend are killed after it."""
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
            _kill_live_jobs(cluster)
            current_context.reset(token)
    else:
        ray = request.getfixturevalue("ray_head")
        from iris.backends.ray.backend import RayBackend

        with iris.backend(RayBackend()):
            try:
                yield kind
            finally:
                for named in ray.util.list_named_actors(all_namespaces=True):
                    if named["namespace"] == "iris":
                        ray.kill(ray.get_actor(named["name"], namespace="iris"))


def _kill_live_jobs(cluster) -> None:
    """Kill what the test left running, then check that their names left the registry: the
    controller withdraws an attempt's names as it ends it (iris/actors/holders.py), so the
    next test's actor of the same name never meets them. A name still listed is a stale
    entry, which `iris.spawn` or `iris.resolve` might hand back: fail here, naming it and
    its holder. The wait covers the withdrawal's hop from the controller to the registry
    (a post onto the node's loop); it is one renewal interval, a third of the registry's lease, so
    a name that only its lease would have cleared is seen here."""
    from iris.actors.registry import RENEW_INTERVAL_S
    from iris.client.retry import call_controller

    for row in call_controller(cluster.node, cluster.address, "list_jobs", (None, False)):
        call_controller(cluster.node, cluster.address, "kill", (row["job_id"],))
    gate = threading.Event()
    deadline = time.monotonic() + RENEW_INTERVAL_S
    while True:
        left = [f"{a['name']} (job {a.get('job') or '-'}, attempt {a.get('attempt') or '-'})"
                for a in cluster.list_actors("/") if not a["name"].startswith("/iris")]
        if not left:
            return
        assert time.monotonic() < deadline, \
            f"killed actors still registered after their jobs were killed: {left}"
        gate.wait(0.05)
