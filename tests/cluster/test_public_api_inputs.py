"""The public API refuses bad arguments with an error naming the argument and what was
expected, before anything reaches the cluster (issue 13, item 5).

No cluster is under test here (the refusals come before anything is sent), so these run on
the in-process backend (issue 28): the same public calls, no controller or worker started.
Refusals only a cluster can make (what no host can hold) are in test_jobs.py."""

from __future__ import annotations

import pytest

import iris
from iris.base.errors import InvalidRequestError


@pytest.fixture
def inprocess():
    with iris.backend("inprocess") as backend:
        yield backend


def _noop() -> None:
    return None


def _unpicklable():
    import threading

    return threading.Lock()


class NotAnActor:
    pass


@iris.actor
class Broken:
    def __init__(self) -> None:
        raise ValueError("bad config: lr must be > 0")

    def ping(self) -> str:
        return "pong"


@pytest.mark.parametrize("call, field, says", [
    (lambda: iris.submit("echo hello"), "entry", "['echo', 'hello']"),
    (lambda: iris.submit(42), "entry", "a callable or a non-empty list"),
    (lambda: iris.submit(_noop, resources="lots"), "resources", "iris.Resources"),
    (lambda: iris.submit(_noop, resources={"cpu": 2}), "resources", "iris.Resources"),
    (lambda: iris.submit(_noop, constraints="zone=a"), "constraints", "{'zone'"),
    (lambda: iris.submit(_noop, replicas=0), "replicas", "an int >= 1"),
    (lambda: iris.submit(_noop, priority="urgent"), "priority", "production"),
    (lambda: iris.submit(_noop, pip="numpy"), "pip", "a list of requirement strings"),
    (lambda: iris.submit(_noop, timeout=float("nan")), "timeout", "finite"),
    (lambda: iris.submit(_noop, checkpoint_every=0), "checkpoint_every", "seconds > 0"),
    (lambda: iris.resolve(123), "name", "an actor name"),
    (lambda: iris.Resources(cpu=float("nan")), "cpu", "finite"),
    (lambda: iris.Resources(memory="1000Ti"), "memory", "more than any machine"),
])
def test_bad_arguments_are_refused_and_named(inprocess, call, field, says):
    with pytest.raises(InvalidRequestError) as info:
        call()
    assert info.value.field == field and says in str(info.value)


def test_an_unpicklable_result_fails_the_task_with_the_reason(inprocess):
    job = iris.submit(_unpicklable)
    with pytest.raises(RuntimeError, match="could not be pickled"):
        job.result(timeout=120)


def test_spawning_a_class_without_the_decorator_is_refused_at_once(inprocess):
    with pytest.raises(TypeError, match="@iris.actor"):
        iris.spawn(NotAnActor, name="nope")


def test_spawn_surfaces_the_actors_own_error_when_its_task_fails(inprocess):
    with pytest.raises(ValueError, match="bad config: lr must be > 0"):
        iris.spawn(Broken, name="broken", timeout=120, max_retries_failure=0)

