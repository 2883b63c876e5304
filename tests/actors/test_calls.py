"""Actor tier: calls on real sockets within one process — semantics, errors, hooks, deadlines."""

from __future__ import annotations

import asyncio
import threading

import pytest

import iris
from iris.base.errors import ActorDiedError, DeadlineExceededError


class Unrebuildable(Exception):
    """Its pickle cannot be loaded: __init__ wants two arguments, args holds one."""

    def __init__(self, what: str, code: int):
        super().__init__(f"{what} failed with {code}")


@iris.actor
class Counter:
    def __init__(self, start: int = 0):
        self.value = start
        self.threads: set[str] = set()
        self.events: list[str] = []

    def on_start(self):
        self.events.append("started")

    def add(self, n: int = 1) -> int:
        self.threads.add(threading.current_thread().name)
        self.value += n
        return self.value

    def get(self) -> int:
        return self.value

    def seen_threads(self) -> list[str]:
        return sorted(self.threads)

    def lifecycle(self) -> list[str]:
        return list(self.events)

    def fail(self, message: str):
        raise KeyError(message)

    def fail_unrebuildable(self):
        raise Unrebuildable("disk", 3)

    def block(self, gate_ref, seconds: float) -> str:
        gate_ref.wait(seconds)
        return "unblocked"

    async def slow_async(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"


@iris.actor(max_concurrency=2)
class Gauge:
    def __init__(self):
        self.running = 0
        self.peak = 0

    async def hold(self, seconds: float) -> int:
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(seconds)
        self.running -= 1
        return self.peak


@iris.actor
class Waiter:
    """Blocks its own thread until released; to prove other actors keep serving."""

    def __init__(self, gate: threading.Event | None = None,
                 entered: threading.Event | None = None):
        self.gate = gate or threading.Event()
        self.entered = entered or threading.Event()  # set once a wait_for_gate is running

    async def ping(self) -> str:
        return "pong"

    def wait_for_gate(self) -> bool:
        self.entered.set()
        return self.gate.wait(60)

    async def release(self) -> None:
        self.gate.set()


def test_sync_method_returns_value_and_runs_on_the_actor_thread(cluster):
    ref = Counter.serve("counter", 10)
    assert ref.add(5).result(10) == 15
    assert [ref.add() for _ in range(20)][-1].result(10) == 35
    assert ref.seen_threads().result(10) == ["iris-actor-/counter"]


def test_start_hook_runs_before_the_first_call(cluster):
    ref = Counter.serve("hooks")
    assert ref.lifecycle().result(10) == ["started"]


def test_future_is_awaitable_from_another_event_loop(cluster):
    ref = Counter.serve("awaited")

    async def main():
        return await ref.add(2), await ref.slow_async(0.01)

    assert asyncio.run(main()) == (2, "slept")


def test_future_callbacks_fire_once_with_the_result(cluster):
    ref = Counter.serve("callbacks")
    seen = []
    done = threading.Event()
    fut = ref.add(3)
    fut.add_done_callback(lambda f: (seen.append(f.result()), done.set()))
    assert done.wait(10) and seen == [3] and fut.done()


def test_cast_is_fire_and_forget_but_is_applied_in_order(cluster):
    ref = Counter.serve("casts")
    for _ in range(50):
        assert ref.add.cast(1) is None
    assert ref.get().result(10) == 50


def test_blocking_method_does_not_stall_other_actors(cluster):
    waiter = Waiter.serve("waiter")
    other = Counter.serve("other")
    blocked = waiter.wait_for_gate()
    assert other.add(1).result(10) == 1  # served while waiter's thread is blocked
    assert waiter.release().result(10) is None  # async method: runs on the loop, not the thread
    assert blocked.result(10) is True


def test_async_methods_respect_max_concurrency(cluster):
    ref = Gauge.serve("gauge")
    futures = [ref.hold(0.05) for _ in range(8)]
    assert max(f.result(30) for f in futures) == 2


def test_exception_arrives_with_its_type_and_remote_traceback(cluster):
    ref = Counter.serve("errors")
    with pytest.raises(KeyError) as info:
        ref.fail("missing-key").result(10)
    note = "\n".join(info.value.__notes__)
    assert "Remote traceback (/errors.fail at tcp://127.0.0.1:" in note
    assert "raise KeyError(message)" in note


def test_exception_that_cannot_be_rebuilt_becomes_remote_error_with_type_name(cluster):
    ref = Counter.serve("errors2")
    with pytest.raises(iris.RemoteError) as info:
        ref.fail_unrebuildable().result(10)
    assert info.value.remote_type.endswith("Unrebuildable")
    assert "disk failed with 3" in str(info.value) and "Remote traceback" in str(info.value)


def test_unknown_method_names_the_actor_method_and_address(cluster):
    ref = Counter.serve("methods")
    with pytest.raises(iris.MethodNotFoundError) as info:
        ref.no_such_method().result(10)
    message = str(info.value)
    assert "'/methods'" in message and "'no_such_method'" in message and ref.address in message


def test_wrong_arguments_are_a_typed_error_naming_the_signature(cluster):
    ref = Counter.serve("args")
    with pytest.raises(iris.BadArgumentsError) as info:
        ref.add(1, 2, 3).result(10)
    assert "/args.add(n: " in str(info.value) and "positional arguments" in str(info.value)
    assert ref.get().result(10) == 0  # nothing ran


def test_unknown_actor_at_an_address_is_a_typed_error(cluster):
    node = cluster.node
    with pytest.raises(iris.ActorNotFoundError, match="no actor '/ghost'"):
        node.call(node.address, "/ghost", "m").result(10)


def test_resolve_of_a_name_never_registered_fails_after_waiting(cluster):
    with pytest.raises(iris.ActorNotFoundError, match="/nobody"):
        iris.resolve("nobody", timeout=0.2)


def test_deadline_exceeded_when_the_method_outlives_the_timeout(cluster):
    ref = Counter.serve("deadline")
    with pytest.raises(DeadlineExceededError) as info:
        ref.slow_async.options(timeout=0.2)(5).result(30)
    assert isinstance(info.value, TimeoutError)
    assert "/deadline.slow_async" in str(info.value)


def test_result_timeout_bounds_the_wait_only(cluster):
    ref = Counter.serve("wait-only")
    fut = ref.slow_async(0.5)
    with pytest.raises(TimeoutError, match="still pending"):
        fut.result(timeout=0.01)
    assert fut.result(30) == "slept"


def test_calls_queued_when_the_actor_stops_get_actor_died(cluster):
    gate, entered = threading.Event(), threading.Event()
    waiter = Waiter.serve("stopping", gate, entered)
    first = waiter.wait_for_gate()
    queued = [waiter.wait_for_gate() for _ in range(3)]
    assert entered.wait(30)  # the first call runs; the other three wait in the mailbox
    stopper = threading.Thread(target=cluster.unserve, args=("stopping",))
    stopper.start()
    with pytest.raises((ActorDiedError, iris.ActorNotFoundError)):  # probe until it refuses
        for _ in range(10_000):
            waiter.ping().result(10)
    gate.set()
    stopper.join(30)
    assert first.result(10) is True
    for fut in queued:
        with pytest.raises(ActorDiedError):
            fut.result(10)


def test_serving_a_plain_class_is_refused():
    class Plain:
        pass

    with iris.local_cluster() as c, pytest.raises(TypeError, match="@iris.actor"):
        c.serve(Plain, "plain")


def test_refs_pickle_and_work_after_unpickling(cluster):
    import pickle

    ref = Counter.serve("pickled")
    clone = pickle.loads(pickle.dumps(ref))
    assert clone == ref and clone.add(4).result(10) == 4


def test_resolve_all_broadcasts_and_round_robins(cluster):
    first = Counter.serve("/replicas/a", 100)
    second_node = iris.connect(cluster.address)
    try:
        second_node.serve(Counter, "/replicas/a", 200)
        group = iris.resolve_all("/replicas/a")
        assert len(group) == 2 and first in group.refs
        assert sorted(f.result(10) for f in group.add.broadcast(1)) == [101, 201]
        assert sorted(group.get().result(10) for _ in range(2)) == [101, 201]
    finally:
        second_node.close()


@iris.actor
class Ticker:
    tick_interval_s = 0.01

    def __init__(self, reached: threading.Event):
        self.ticks = 0
        self.threads: set[str] = set()
        self.reached = reached

    def on_tick(self):
        self.ticks += 1
        self.threads.add(threading.current_thread().name)
        if self.ticks >= 5:
            self.reached.set()

    def tick_threads(self) -> list[str]:
        return sorted(self.threads)


def test_on_tick_runs_on_the_actor_thread_between_calls(cluster):
    reached = threading.Event()
    ref = Ticker.serve("ticker", reached)
    assert reached.wait(60)
    assert ref.tick_threads().result(30) == ["iris-actor-/ticker"]
