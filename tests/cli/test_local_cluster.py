"""An honest local cluster: what its workers offer, a taken dashboard port, API times."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

import iris
from iris.base.errors import ConfigError, InvalidRequestError
from iris.client.cluster import local_share
from iris.dashboard import launch
from iris.dashboard.server import DEFAULT_PORT, PortInUseError
from tests.conftest import ENV_CACHE, as_current


def test_local_share_splits_the_machine_between_workers_unless_asked():
    cpus = len(os.sched_getaffinity(0))
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    one, two = local_share(1), local_share(2)
    assert one.cpu == cpus and one.memory == memory
    assert two.cpu == max(1, cpus // 2) and two.memory == memory // 2
    asked = local_share(2, cpu=8, memory="4GiB")
    assert (asked.cpu, asked.memory) == (8.0, 4 << 30)
    assert str(asked) == "cpu=8 memory=4 GiB"


@pytest.mark.parametrize("cpu,memory,field", [(0, None, "worker_cpu"), (-1, None, "worker_cpu"),
                                              ("8", None, "worker_cpu"),
                                              (None, "lots", "worker_memory"),
                                              (None, 0, "worker_memory")])
def test_local_share_refuses_bad_sizes_naming_the_argument(cpu, memory, field):
    with pytest.raises(InvalidRequestError) as info:
        local_share(2, cpu=cpu, memory=memory)
    assert info.value.field == field


def test_local_workers_advertise_their_share_and_refuse_what_no_share_holds(tmp_path):
    with iris.local_cluster(workers=2, worker_cpu=1, worker_memory="1GiB",
                            state_dir=tmp_path) as ctx:
        workers = ctx.node.call(ctx.address, "/iris/controller", "list_workers").result(60)
        assert [(w["cpu"], w["memory_bytes"]) for w in workers] == [(1.0, 1 << 30)] * 2
        with pytest.raises(iris.IrisError, match="memory=2 GiB"):
            iris.submit(["true"], resources=iris.Resources(memory="2GiB"))


def venv_once_all_run(barrier: str, count: int) -> str:
    """This task's venv, once `count` tasks have joined `barrier` (a file each): all of them
    ran at once, so on as many workers when each needs a whole worker."""
    Path(barrier, str(os.getpid())).touch()
    deadline = time.monotonic() + 300
    while len(os.listdir(barrier)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return sys.prefix


def test_local_workers_share_one_env_cache_in_the_state_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_CACHE, raising=False)  # the cluster's own, not the suite's
    barrier, state = tmp_path / "barrier", tmp_path / "state"
    barrier.mkdir()
    with iris.local_cluster(workers=2, worker_cpu=1, state_dir=state):
        job = iris.submit(venv_once_all_run, str(barrier), 2, replicas=2)
        prefixes = job.result(timeout=300)
        assert len({t["worker_id"] for t in job.tasks()}) == 2
    assert len(set(prefixes)) == 1, prefixes
    assert Path(prefixes[0]).parent == (state / "envs").resolve()
    assert not list(state.glob("worker-*/envs"))


@pytest.mark.parametrize("bad", [3, "", ["envs"]])
def test_local_cluster_refuses_an_env_cache_that_is_no_path(bad):
    with pytest.raises(ConfigError, match="env_cache"), iris.local_cluster(env_cache=bad):
        pass


@pytest.fixture(scope="module")
def _no_workers(tmp_path_factory):
    with iris.local_cluster(workers=0, state_dir=tmp_path_factory.mktemp("local")) as ctx:
        yield ctx


@pytest.fixture
def no_workers(_no_workers):
    """A cluster without workers shared by the module's tests, current for this test."""
    with as_current(_no_workers):
        yield _no_workers


def _hold(port: int) -> socket.socket | None:
    """Listen on `port` (None if another process already does: it is taken either way)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    sock.listen()
    return sock


def test_taken_default_dashboard_port_is_reported_and_an_asked_one_refused(no_workers):
    ctx = no_workers
    holder = _hold(DEFAULT_PORT)
    try:
        handle = launch(ctx.node, ctx.address)
        try:
            assert handle.port != DEFAULT_PORT
            assert f"port {DEFAULT_PORT} is taken" in handle.note
            assert str(handle.port) in handle.note and "--dashboard-port" in handle.note
        finally:
            handle.stop()
        with pytest.raises(PortInUseError, match=f"127.0.0.1:{DEFAULT_PORT}"):
            launch(ctx.node, ctx.address, port=DEFAULT_PORT)
    finally:
        if holder is not None:
            holder.close()


@iris.actor
class Probe:
    def ping(self) -> str:
        return "pong"


def test_list_actors_times_are_wall_clock_epoch_seconds(no_workers):
    ctx = no_workers
    before = ctx.node.clock.wall()
    Probe.serve("probe")
    after = ctx.node.clock.wall()
    try:
        (entry,) = [e for e in iris.list_actors() if e["name"] == "/probe"]
        assert before - 1 <= entry["registered_at"] <= after + 1
        assert entry["expires_at"] > entry["registered_at"]
    finally:  # the cluster outlives the test: its actor thread must not
        ctx.unserve("probe")
