"""The Ray-shaped layer used as a Ray user would: refs in arguments, get and wait at their
edges, bad options, named actors, kill, init and shutdown. Each case runs on the in-process
backend and on the shared Iris cluster (real worker processes); the ported program runs on
Ray too (test_ported_program.py)."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import iris
from iris.compat import ray

BOTH = pytest.mark.parametrize("backend", ["inprocess", "iris"], indirect=True)


@pytest.fixture(autouse=True)
def _fresh_init_state(monkeypatch):
    """ray.init()'s state is process-wide (as Ray's): each test starts and ends without it."""
    ray.shutdown()
    monkeypatch.setattr(ray, "_initialized", [None], raising=False)
    yield
    ray.shutdown()


@ray.remote
def echo(x):
    return x


@ray.remote
def keywords(fn=None, a=1):
    return fn, a


@ray.remote
def get_each(refs):
    return [ray.get(r) for r in refs]


@ray.remote
def getenv(name):
    return os.environ.get(name)


@ray.remote
def wait_for(seconds):
    threading.Event().wait(seconds)
    return seconds


@ray.remote
class Counter:
    def __init__(self, n=0):
        self.n = n

    def add(self, k=1):
        self.n += k
        return self.n


# ---------------------------------------------------------------- refs in arguments

@BOTH
def test_a_keyword_named_fn_reaches_the_users_function(backend):
    assert ray.get(keywords.remote(fn=3, a=4), timeout=120) == (3, 4)


@BOTH
def test_refs_nested_in_an_argument_reach_the_task_as_refs_it_can_get(backend):
    """Ray passes a ref inside a list as a ref; here a task's ref is resolved first and
    arrives ready, a put ref arrives as itself."""
    refs = [ray.put(1), echo.remote(2), Counter.remote(2).add.remote(1)]
    assert ray.get(get_each.remote(refs), timeout=120) == [1, 2, 3]


@BOTH
def test_put_of_a_ref_is_refused_as_on_ray(backend):
    with pytest.raises(TypeError, match="'put' on an ObjectRef"):
        ray.put(echo.remote(1))


def _add(a, b):
    return a + b


class _Double:
    def __call__(self, x):
        return 2 * x


@BOTH
@pytest.mark.parametrize("make, expected", [
    (lambda: ray.remote(lambda x: x + 1), 3),
    (lambda: ray.remote(functools.partial(_add, 1)), 3),
    (lambda: ray.remote(_Double()), 4),
    (lambda: ray.remote(functools.partial(_add, 2)).options(name="my task: step 1!"), 4),
    (lambda: ray.remote(_add).options(name="é" * 80).options(name=None), None),
], ids=["lambda", "partial", "callable", "free-text-name", "no-name"])
def test_any_callable_and_any_task_name_runs_as_on_ray(backend, make, expected):
    """On Ray a task's name is a label; here it becomes a valid job name."""
    if expected is None:
        assert ray.get(make().remote(1, 2), timeout=120) == 3
    else:
        assert ray.get(make().remote(2), timeout=120) == expected


@ray.remote
async def async_double(x):
    await asyncio.sleep(0)
    return 2 * x


@BOTH
def test_an_async_def_task_returns_its_value_not_a_coroutine(backend):
    assert ray.get(async_double.remote(21), timeout=120) == 42


# ---------------------------------------------------------------- get and wait

class _SlowRef(ray.ObjectRef):
    """A ref that takes `seconds` to read and notes the timeout it was given."""

    def __init__(self, seconds: float):
        self.seconds, self.given = seconds, None

    def done(self) -> bool:
        return False

    def result(self, timeout=None):
        self.given = timeout
        threading.Event().wait(self.seconds)
        return self.seconds


def test_get_timeout_bounds_the_whole_list_not_each_ref():
    first, second = _SlowRef(0.3), _SlowRef(0)
    ray.get([first, second], timeout=30)
    assert first.given <= 30 and second.given < 29.75  # what the first took is spent


@pytest.mark.parametrize("call, error, named", [
    (lambda: ray.wait([1]), TypeError, "ObjectRefs"),
    (lambda: ray.wait([ray.put(1)], num_returns=-1), ValueError, "num_returns"),
    (lambda: ray.wait([ray.put(1)], timeout=-1), ValueError, "timeout"),
    (lambda: ray.get(ray.put(1), timeout="soon"), ValueError, "timeout"),
])
def test_bad_wait_and_get_arguments_are_clear_errors(call, error, named):
    with iris.backend("inprocess"), pytest.raises(error, match=named):
        call()


# ---------------------------------------------------------------- options

BAD_OPTIONS = [
    ({"num_cpus": -1}, "num_cpus"),
    ({"num_cpus": "two"}, "num_cpus"),
    ({"num_gpus": -1}, "num_gpus"),
    ({"memory": -5}, "memory"),
    ({"name": 5}, "name"),
    ({"resources": "x"}, "resources"),
    ({"resources": {"CPU": 2}}, "num_cpus"),
    ({"resources": {"GPU": 1}}, "num_gpus"),
    ({"scheduling_strategy": object()}, "scheduling_strategy"),
]


@pytest.mark.parametrize("options, named", BAD_OPTIONS + [
    ({"max_retries": "x"}, "max_retries"),
    ({"max_retries": -2}, "max_retries"),
    ({"retry_exceptions": [ValueError]}, "retry_exceptions=True"),
])
def test_bad_task_options_are_refused_at_options_naming_the_option(options, named):
    with pytest.raises(iris.InvalidRequestError, match=named):
        echo.options(**options)


@pytest.mark.parametrize("options, named", BAD_OPTIONS)
def test_bad_actor_options_are_refused_at_options_not_at_remote(options, named):
    with pytest.raises(iris.InvalidRequestError, match=named):
        Counter.options(**options)


def test_max_retries_minus_one_retries_forever_as_on_ray():
    from iris.compat.ray_options import FOREVER, task_submit_options

    assert task_submit_options({"max_retries": -1})["max_retries_preemption"] == FOREVER
    assert task_submit_options({"max_retries": -1, "retry_exceptions": True})[
        "max_retries_failure"] == FOREVER


# ---------------------------------------------------------------- named actors and kill

@BOTH
def test_a_second_actor_of_a_taken_name_is_a_value_error_as_on_ray(backend):
    first = Counter.options(name="taken").remote(10)
    with pytest.raises(ValueError, match="already taken"):
        Counter.options(name="taken").remote()
    same = Counter.options(name="taken", get_if_exists=True).remote()
    assert ray.get(same.add.remote(), timeout=60) == 11
    assert ray.get(ray.get_actor("taken").add.remote(), timeout=60) == 12
    assert ray.get(first.add.remote(), timeout=60) == 13


@BOTH
def test_a_call_after_kill_fails_as_an_actor_error(backend):
    actor = Counter.options(name="doomed").remote()
    assert ray.get(actor.add.remote(), timeout=60) == 1
    ray.kill(actor)
    with pytest.raises(ray.exceptions.RayActorError, match="killed"):
        ray.get(actor.add.remote(), timeout=60)


@BOTH
def test_every_call_to_an_actor_that_died_is_an_actor_error(backend):
    """The first calls see the connection go; later ones find its name withdrawn: all of
    them are RayActorError, as on Ray."""
    from tests.backends.tasks import Tally

    actor = ray.remote(Tally).remote()
    for method in ["die", "value", "value", "value"]:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(getattr(actor, method).remote(), timeout=60)


@ray.remote
def serve_named_actor(name):
    """Make `name`, then wait (up to 60 s) until someone else has added 1 to it."""
    actor = Counter.options(name=name).remote(100)
    gate = threading.Event()
    for _ in range(600):
        if ray.get(actor.add.remote(0), timeout=60) > 100:
            return ray.get(ray.get_actor("outside").add.remote(1), timeout=60)
        gate.wait(0.1)
    return "nobody found it"


def _find(name):
    gate = threading.Event()
    for _ in range(600):
        try:
            return ray.get_actor(name)
        except ValueError:
            gate.wait(0.1)
    return ray.get_actor(name)


@BOTH
def test_named_actors_are_one_space_for_the_driver_and_its_tasks_as_on_ray(backend):
    """A task's actor of a given name is found by the driver, and the driver's by the
    task (on Iris a relative name would live under the task's own job)."""
    outside = Counter.options(name="outside").remote()
    served = serve_named_actor.remote("inside")
    assert ray.get(_find("inside").add.remote(1), timeout=60) == 101
    assert ray.get(served, timeout=120) == 1
    assert ray.get(outside.add.remote(), timeout=60) == 2


# ---------------------------------------------------------------- init and shutdown

def test_is_initialized_after_init_until_shutdown():
    assert not ray.is_initialized()  # no backend, no init()
    ray.init()
    assert ray.is_initialized()
    ray.init()  # twice is harmless
    ray.shutdown()
    assert not ray.is_initialized()
    ray.init()
    assert ray.is_initialized()


def test_init_runtime_env_reaches_tasks_submitted_from_other_threads(monkeypatch):
    """A pool's thread starts with a context of its own; ray.init() is the process's."""
    monkeypatch.setenv("IRIS_BACKEND", "inprocess")  # the process's backend, every thread's
    ray.init(runtime_env={"env_vars": {"H38_RAY_PROBE": "set"}})
    with ThreadPoolExecutor(1) as pool:
        ref = pool.submit(getenv.remote, "H38_RAY_PROBE").result()
    assert ray.get(ref, timeout=60) == "set"


def test_shutdown_forgets_inits_runtime_env():
    with iris.backend("inprocess"):
        ray.init(runtime_env={"env_vars": {"H38_RAY_PROBE": "set"}})
        ray.shutdown()
        assert ray.get(getenv.remote("H38_RAY_PROBE"), timeout=60) is None


def test_what_ray_has_and_the_layer_does_not_is_an_attribute_error_saying_so():
    with pytest.raises(AttributeError, match="not mapped by iris.compat.ray"):
        ray.nodes()
    assert not hasattr(ray, "timeline")


@BOTH
def test_inits_namespace_names_the_actors_made_and_looked_up_without_one(backend):
    ray.init(namespace="team")
    Counter.options(name="shared").remote(5)
    assert ray.get(ray.get_actor("shared", namespace="team").add.remote(), timeout=60) == 6
    assert ray.get(ray.get_actor("shared").add.remote(), timeout=60) == 7
    ray.shutdown()
    with pytest.raises(ValueError, match="shared"):
        ray.get_actor("shared")


def test_task_env_vars_merge_with_inits_as_on_ray():
    from iris.compat.ray_options import runtime_env

    ray.init(runtime_env={"env_vars": {"A": "1", "B": "1"}})
    assert runtime_env({"runtime_env": {"env_vars": {"B": "2"}}}) == {
        "env": {"A": "1", "B": "2"}}


@pytest.mark.parametrize("env, expected", [
    ({"pip": {"packages": ["numpy"], "pip_check": False}}, {"pip": ["numpy"]}),
    ({"pip": ["numpy"]}, {"pip": ["numpy"]}),
])
def test_pip_in_its_ray_forms(env, expected):
    from iris.compat.ray_options import runtime_env

    assert runtime_env({"runtime_env": env}) == expected


@pytest.mark.parametrize("env, named", [
    ({"pip": "requirements.txt"}, "requirements file"),
    ({"pip": [1]}, "pip"),
    ({"env_vars": {"A": 1}}, "env_vars"),
    ("numpy", "runtime_env"),
])
def test_bad_runtime_envs_are_refused_naming_the_field(env, named):
    with pytest.raises(iris.InvalidRequestError, match=named):
        echo.options(runtime_env=env)
    with pytest.raises(iris.InvalidRequestError, match=named):
        ray.init(runtime_env=env)
    assert not ray.is_initialized()
