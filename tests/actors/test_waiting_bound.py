"""Actor tier: the calls waiting for one actor are bounded. Past `max_waiting_calls` a new
call is refused at once with OverloadedError (a retry hint, the actor named), over real
sockets, instead of queueing without limit; what was already waiting still runs, and once
the line shortens calls are taken again. The same for a @batched method's batch."""

from __future__ import annotations

import threading

import pytest

from iris.actors import Node, NodeConfig, actor
from iris.actors.batching import batched
from iris.base.errors import OverloadedError

KEY = "/test/slow"
LIMIT = 5


@actor
class Slow:
    def __init__(self):
        self.gate = threading.Event()
        self.blocked = threading.Event()
        self.ran: list[int] = []

    def block(self) -> None:
        self.blocked.set()
        self.gate.wait(60)

    def work(self, n: int) -> int:
        self.ran.append(n)
        return n

    @batched("_report_all")
    def report(self, n: int) -> int:
        return n

    def _report_all(self, items: list) -> list:
        return [args[0] for args, _ in items]


@pytest.fixture
def nodes():
    with Node(NodeConfig(bind="tcp://127.0.0.1:0", max_waiting_calls=LIMIT)) as server, \
            Node(NodeConfig(bind="tcp://127.0.0.1:0")) as client:
        yield server, client


def _flood(nodes, method: str, wait_until) -> tuple[list, list, object]:
    server, client = nodes
    hosted = server.host(KEY, Slow)
    blocker = client.call(server.address, KEY, "block", timeout_s=60)
    assert hosted.instance.blocked.wait(30)
    received = server.stats.calls_received
    futs = [client.call(server.address, KEY, method, (i,), timeout_s=60) for i in range(20)]
    wait_until(lambda: server.stats.calls_received >= received + 20, 60, "20 calls received")
    refused = []
    for fut in futs[LIMIT:]:  # refused while the actor is still blocked: at once
        with pytest.raises(OverloadedError, match=f"{KEY}.*{LIMIT} calls waiting") as info:
            fut.result(30)
        refused.append(info.value)
    hosted.instance.gate.set()
    blocker.result(60)
    return futs, refused, hosted


def test_calls_past_the_waiting_bound_are_refused_at_once_and_the_rest_still_run(
        nodes, wait_until):
    futs, refused, hosted = _flood(nodes, "work", wait_until)
    assert [f.result(60) for f in futs[:LIMIT]] == list(range(LIMIT))
    assert hosted.instance.ran == list(range(LIMIT))  # the refused never ran
    assert all(e.retry_after_s > 0 for e in refused)
    server, client = nodes
    assert server.stats.refused_overloaded == 20 - LIMIT
    assert client.call(server.address, KEY, "work", (99,), timeout_s=60).result(60) == 99


def test_a_batch_past_the_waiting_bound_refuses_new_calls_and_answers_the_rest(
        nodes, wait_until):
    futs, refused, _ = _flood(nodes, "report", wait_until)
    assert [f.result(60) for f in futs[:LIMIT]] == list(range(LIMIT))
    assert len(refused) == 20 - LIMIT
    server, client = nodes
    assert client.call(server.address, KEY, "report", (7,), timeout_s=60).result(60) == 7
