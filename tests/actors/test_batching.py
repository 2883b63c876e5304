"""Actor tier: a @batched method's calls that arrive together are handled in ONE turn, over
real sockets, each caller getting its own answer: its value, its own error (with its type),
or the check's refusal sent at once from the loop thread."""

from __future__ import annotations

import threading

import pytest

from iris.actors import Node, NodeConfig, actor
from iris.actors.batching import batched
from iris.base.errors import (
    BadArgumentsError,
    DeadlineExceededError,
    InvalidRequestError,
    NotFoundError,
)

KEY = "/test/batcher"


def _check(n):
    if not isinstance(n, int):
        raise InvalidRequestError(f"n: expected an int, got {type(n).__name__}", "n")
    return n


@actor
class Batcher:
    def __init__(self):
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.blocked = threading.Event()
        self.noted: list[int] = []

    def block(self) -> None:
        """Hold the actor's thread until the test opens the gate."""
        self.blocked.set()
        self.gate.wait(60)

    @batched("_double_all", check=_check)
    def double(self, n: int) -> int:
        return self._double_all([n])[0]

    @batched("_note_all", late=True)
    def note(self, n: int) -> None:
        self._note_all([((n,), {})])

    @batched("_latest_all", key=lambda item: item[0][0])
    def latest(self, who: str, n: int) -> int:
        return n

    def _latest_all(self, items: list) -> list:
        self.batches.append([args for args, _ in items])
        return [args[1] for args, _ in items]

    def _note_all(self, items: list) -> list:
        self.noted.extend(args[0] for args, _ in items)
        return [None] * len(items)

    def _double_all(self, items: list[int]) -> list:
        self.batches.append(list(items))
        return [NotFoundError(f"no {n}") if n == 13 else 2 * n for n in items]


@pytest.fixture
def nodes():
    with Node(NodeConfig(bind="tcp://127.0.0.1:0")) as server, \
            Node(NodeConfig(bind="tcp://127.0.0.1:0")) as client:
        yield server, client


def test_batched_calls_queued_behind_a_turn_are_handled_in_one_turn(nodes, wait_until):
    server, client = nodes
    hosted = server.host(KEY, Batcher)
    blocker = client.call(server.address, KEY, "block", timeout_s=60)
    assert hosted.instance.blocked.wait(30)
    received = server.stats.calls_received
    futs = [client.call(server.address, KEY, "double", (i,), timeout_s=60) for i in range(50)]
    wait_until(lambda: server.stats.calls_received >= received + 50, 60, "50 calls received")
    hosted.instance.gate.set()
    blocker.result(60)
    for i, fut in enumerate(futs):
        if i == 13:
            with pytest.raises(NotFoundError, match="no 13"):  # its own error, its type
                fut.result(60)
        else:
            assert fut.result(60) == 2 * i
    assert hosted.instance.batches == [list(range(50))]  # one turn, in arrival order


def test_a_batched_call_the_check_refuses_is_answered_at_once_and_never_reaches_the_actor(
        nodes):
    server, client = nodes
    hosted = server.host(KEY, Batcher)
    blocker = client.call(server.address, KEY, "block", timeout_s=60)
    assert hosted.instance.blocked.wait(30)
    try:  # both answered while the actor's thread is still held
        with pytest.raises(InvalidRequestError, match="n: expected an int, got str"):
            client.call(server.address, KEY, "double", ("x",), timeout_s=60).result(60)
        with pytest.raises(BadArgumentsError, match=r"double\(n: 'int'\)"):
            client.call(server.address, KEY, "double", (1, 2), timeout_s=60).result(60)
    finally:
        hosted.instance.gate.set()
    blocker.result(60)
    assert client.call(server.address, KEY, "double", (4,), timeout_s=60).result(60) == 8
    assert hosted.instance.batches == [[4]]


def test_batched_calls_waiting_when_the_actor_stops_get_actor_died(nodes, wait_until):
    from iris.base.errors import ActorDiedError

    server, client = nodes
    hosted = server.host(KEY, Batcher)
    client.call(server.address, KEY, "block", timeout_s=60)
    assert hosted.instance.blocked.wait(30)
    received = server.stats.calls_received
    fut = client.call(server.address, KEY, "double", (1,), timeout_s=60)
    wait_until(lambda: server.stats.calls_received > received, 60, "the call received")
    hosted.stop(wait=False)
    hosted.instance.gate.set()
    with pytest.raises(ActorDiedError):
        fut.result(60)
    hosted.stop()


def test_a_batched_call_past_its_deadline_runs_only_if_its_method_allows_late(nodes,
                                                                             wait_until):
    from iris.base.errors import DeadlineExceededError

    server, client = nodes
    hosted = server.host(KEY, Batcher)
    client.call(server.address, KEY, "block", timeout_s=60)
    assert hosted.instance.blocked.wait(30)
    received = server.stats.calls_received
    timeout_s = 0.2
    doubled = client.call(server.address, KEY, "double", (1,), timeout_s=timeout_s)
    noted = client.call(server.address, KEY, "note", (7,), timeout_s=timeout_s)
    wait_until(lambda: server.stats.calls_received >= received + 2, 60, "both received")
    for fut in (doubled, noted):  # both callers gave up while the actor was held
        with pytest.raises(DeadlineExceededError):
            fut.result(60)
    # The server's deadline runs from when it received a call (node.py), which may be later
    # than the caller's: past it for certain only `timeout_s` after both were seen received.
    threading.Event().wait(2 * timeout_s)
    hosted.instance.gate.set()
    wait_until(lambda: hosted.instance.noted == [7], 60, "the late report applied")
    assert client.call(server.address, KEY, "double", (2,), timeout_s=60).result(60) == 4
    assert hosted.instance.batches == [[2]]  # the late `double` never ran


def test_a_keyed_batch_keeps_only_the_newest_call_per_key_and_tells_the_older_callers(
        nodes, wait_until):
    """A worker's newer report says all its older one did: an actor behind handles one per
    worker, whatever the backlog; the superseded caller hears so, with the reason."""
    server, client = nodes
    hosted = server.host(KEY, Batcher)
    blocker = client.call(server.address, KEY, "block", timeout_s=60)
    assert hosted.instance.blocked.wait(30)
    received = server.stats.calls_received
    sent = [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("b", 2), ("c", 1)]
    futs = [client.call(server.address, KEY, "latest", args, timeout_s=60) for args in sent]
    wait_until(lambda: server.stats.calls_received >= received + len(sent), 60,
               "the calls received")
    for i in (0, 1, 2):  # a1, b1, a2: each replaced by a newer call of its key
        with pytest.raises(DeadlineExceededError, match="superseded"):
            futs[i].result(30)
    hosted.instance.gate.set()
    blocker.result(60)
    assert [f.result(60) for f in futs[3:]] == [3, 2, 1]
    assert hosted.instance.batches == [[("a", 3), ("b", 2), ("c", 1)]]  # one turn, one each
