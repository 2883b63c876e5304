"""One suite, three backends: the same `iris.*` program gives the same outcome in process,
on an Iris cluster and on Ray, failures included (a task that raises, a worker killed
mid-map, an actor that dies, a timeout, an unpicklable argument)."""

from __future__ import annotations

import threading

import pytest

import iris
from tests.backends import tasks
from tests.backends.conftest import untagged

WAIT_S = 120  # generous: a loaded 2-core machine starts task processes slowly


# ---------------------------------------------------------------- jobs

def test_submit_returns_the_value_and_replicas_return_a_list(backend):
    assert iris.backend_kind() == backend
    assert iris.submit(tasks.add, 2, 3).result(timeout=WAIT_S) == 5
    rows = iris.submit(tasks.where_am_i, replicas=2).result(timeout=WAIT_S)
    assert sorted(r["index"] for r in rows) == [0, 1]
    assert {r["num_tasks"] for r in rows} == {2}
    assert {r["kind"] for r in rows} == {backend}  # a task inherits its backend
    assert len({r["job"] for r in rows}) == 1 and rows[0]["job"]


def test_task_that_raises_reaches_the_caller_as_itself(backend):
    job = iris.submit(tasks.raise_boom, "kaput")
    with pytest.raises(tasks.Boom, match="kaput") as info:
        job.result(timeout=WAIT_S)
    assert "raise_boom" in info.value.remote_traceback
    assert job.status()["state"] == "failed"


@pytest.mark.parametrize("how", ["thread", "child process"])
@pytest.mark.parametrize("backend", ["inprocess", "iris"], indirect=True)  # Ray: its own
def test_an_exception_that_cannot_travel_arrives_as_remote_error_naming_its_type(backend, how):
    """As the Iris backend gives it (tests/cluster/test_task_error_transport.py); in process
    it once read "result could not be pickled" from a child, and came as itself in a thread."""
    env = {"IRIS_TEST_CHILD": "1"} if how == "child process" else None  # env: a child
    for fn, kind, text in [(tasks.raise_unpicklable, "HoldsALock", "disk on fire"),
                           (tasks.raise_two_arguments, "TwoArguments", "disk failed with 3")]:
        with pytest.raises(iris.RemoteError) as info:
            iris.submit(fn, "disk on fire" if kind == "HoldsALock" else "disk",
                        env=env).result(timeout=WAIT_S)
        assert info.value.remote_type.endswith(kind)
        assert text in str(info.value) and "could not be pickled" not in str(info.value)
        assert f"in {fn.__name__}" in info.value.remote_traceback


def test_task_submitting_a_task_stays_on_its_backend(backend):
    kind, value = iris.submit(tasks.nested_submit, 7).result(timeout=WAIT_S)
    assert (kind, value) == (backend, 49)


def test_wait_for_several_jobs(backend):
    slow = iris.submit(tasks.sleep_for, 60.0)
    fast = [iris.submit(tasks.square, i) for i in range(3)]
    try:
        done, pending = iris.wait(fast + [slow], num_returns=3, timeout=WAIT_S)
        assert done == fast and pending == [slow]
        done, pending = iris.wait([slow], timeout=0.2)
        assert (done, pending) == ([], [slow])
    finally:
        slow.kill()
    assert [iris.get(j) for j in fast] == [0, 1, 4]


def test_result_timeout_raises_timeout_and_the_job_runs_on(backend):
    job = iris.submit(tasks.sleep_for, 60.0)
    try:
        with pytest.raises(TimeoutError):
            job.result(timeout=0.5)
        assert not job.done()
    finally:
        job.kill()
    assert job.wait(timeout=WAIT_S)["state"] == "killed"


def test_unpicklable_argument_is_named_and_nothing_is_submitted(backend, tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(iris.InvalidRequestError, match=r"args\[1\]: cannot be pickled"):
        iris.submit(tasks.touch, str(marker), threading.Lock())
    with pytest.raises(iris.InvalidRequestError, match=r"inputs\[2\]: cannot be pickled"):
        iris.map(tasks.square, [1, 2, threading.Lock()])
    # the refusal came before any backend call: the backend has no job of it
    assert iris.backend_kind() == backend and not marker.exists()


# ---------------------------------------------------------------- actors

def test_spawn_call_broadcast_and_resolve(backend):
    ref = iris.spawn(tasks.Tally, 10, name="tally")
    assert ref.add(5).result(timeout=WAIT_S) == 15
    assert iris.resolve("tally").value().result(timeout=WAIT_S) == 15
    group = iris.spawn(tasks.Tally, 0, name="crew", replicas=2)
    assert len(group) == 2
    assert [f.result(timeout=WAIT_S) for f in group.add.broadcast(3)] == [3, 3]
    assert len(iris.resolve_all("crew")) == 2


def test_actor_named_in_a_job_lives_in_the_jobs_namespace_and_dies_with_it(backend):
    name, value = iris.submit(tasks.spawn_and_call).result(timeout=WAIT_S)
    assert value == 42
    assert name != "/helper" and name.endswith("/helper")  # under the job's namespace
    with pytest.raises(iris.ActorNotFoundError):
        iris.resolve("helper", timeout=0)  # not in the client's namespace ("/")
    gate = threading.Event()
    for _ in range(300):  # a sub-job never outlives its parent (the registry's lease: 3 s)
        if not any(a["name"] == name for a in iris.list_actors("/")):
            break
        gate.wait(0.1)
    else:
        pytest.fail(f"{name} outlived the job that spawned it")


def test_actor_call_deadline(backend):
    ref = iris.spawn(tasks.Tally, 0, name="sloth")
    with pytest.raises(TimeoutError):
        ref.slow.options(timeout=0.5)(30.0).result(timeout=WAIT_S)


def test_actor_that_dies_fails_calls_with_peer_unavailable(backend):
    ref = iris.spawn(tasks.Tally, 0, name="mayfly")
    assert ref.add(1).result(timeout=WAIT_S) == 1
    with pytest.raises(iris.PeerUnavailableError):
        ref.die().result(timeout=WAIT_S)


def test_unknown_method_is_named(backend):
    ref = iris.spawn(tasks.Tally, 0, name="plain")
    with pytest.raises(iris.MethodNotFoundError, match="nope"):
        ref.nope().result(timeout=WAIT_S)


# ---------------------------------------------------------------- objects

def test_put_then_get_here_and_in_a_task(backend):
    ref = iris.put(bytes(3 << 20))
    assert len(iris.get(ref)) == 3 << 20
    assert iris.submit(tasks.get_len, ref).result(timeout=WAIT_S) == 3 << 20


@pytest.mark.parametrize("backend", ["inprocess", "iris"], indirect=True)  # Ray's put refuses
def test_put_of_an_unpicklable_object_fails_at_put_naming_its_type(backend):
    lock = threading.Lock()
    with pytest.raises(iris.InvalidRequestError, match=r"_thread\.lock cannot be pickled"):
        iris.put(lock)
    with pytest.raises(iris.InvalidRequestError, match="nothing was put"):
        iris.put({"fine": 1, "lock": lock})  # found inside a container too
    assert iris.get(iris.put([1, 2])) == [1, 2]


# ---------------------------------------------------------------- map

def test_map_in_order_and_unordered(backend):
    assert iris.map(tasks.square, range(50), max_parallel=4) == [x * x for x in range(50)]
    pairs = list(iris.map_unordered(tasks.square, range(20), max_parallel=3))
    assert sorted(pairs) == [(i, i * i) for i in range(20)]
    assert iris.map(tasks.square, []) == []


def test_map_failure_names_the_input_with_the_remote_exception(backend):
    with pytest.raises(tasks.Boom, match="input 5 is bad") as info:
        iris.map(tasks.fail_at, range(10), max_parallel=2)
    assert info.value.map_index == 5
    assert "fail_at" in info.value.remote_traceback
    assert any("input 5 (of 10)" in note for note in info.value.__notes__)
    out = iris.map(tasks.fail_at, range(8), return_exceptions=True)
    assert isinstance(out[5], tasks.Boom) and out[4] == 4 and out[7] == 7


def test_map_cancels_the_rest_on_first_failure(backend):
    tally = iris.spawn(tasks.Tally, 0, name="tally")
    with pytest.raises(tasks.Boom, match="first"):
        iris.map(tasks.slow_unless_first, range(40), max_parallel=2)
    ran = set(tally.marked().result(timeout=WAIT_S))
    assert len(ran) < 39, f"{len(ran)} of 39 slow items ran after the first failed"


def test_map_without_cancel_runs_everything_then_raises(backend):
    tally = iris.spawn(tasks.Tally, 0, name="tally")
    with pytest.raises(tasks.Boom) as info:
        iris.map(tasks.slow_unless_first, range(6), max_parallel=3, cancel_on_failure=False)
    ran = tally.marked().result(timeout=WAIT_S)
    if backend == "ray":  # Ray runs a task again when its worker process dies: at least once
        ran = sorted(set(ran))
    assert ran == [1, 2, 3, 4, 5]
    assert any("1 of 6 inputs failed" in note for note in info.value.__notes__)


def test_map_survives_a_worker_killed_mid_map(backend, tmp_path):
    inputs = [(x, str(tmp_path)) for x in range(12)]
    if backend == "inprocess":  # SIGKILL would end this very process: isolate the items
        with untagged(), iris.backend("inprocess+process"):
            out = iris.map(tasks.die_once, inputs, max_parallel=2, retries=2)
    else:
        out = iris.map(tasks.die_once, inputs, max_parallel=2, retries=2)
    assert out == [x * 10 for x in range(12)]
    assert (tmp_path / "died-3").exists()  # the worker really died once


def test_map_item_that_kills_every_worker_is_lost_after_its_retries(backend, tmp_path):
    inputs = [(3, str(tmp_path / "never"))]  # the marker directory does not exist: dies again
    (tmp_path / "never").mkdir()

    def run() -> None:
        iris.map(tasks.die_once_always, inputs, retries=1)

    if backend == "inprocess":
        with untagged(), iris.backend("inprocess+process"), \
                pytest.raises(iris.WorkerLostError) as info:
            run()
    else:
        with pytest.raises(iris.WorkerLostError) as info:
            run()
    assert info.value.map_index == 0
