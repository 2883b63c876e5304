"""Node call statistics on real sockets: outcome counts and the latency histogram that /metrics
publishes move with the calls a node makes, and only with those."""

from __future__ import annotations

import threading

import pytest

from iris.actors import Node, NodeConfig, actor
from iris.base.errors import DeadlineExceededError, PeerUnavailableError

WAIT_S = 30.0
# A lost connection is seen in under a millisecond (the socket monitor, not liveness).
_LOST_CONNECTION_S = 5.0
# A dead peer is noticed fast here so the test does not wait the production 3 s.
FAST_LIVENESS = NodeConfig(heartbeat_interval_s=0.1, peer_dead_after_s=0.5)


@actor
class Service:
    def __init__(self, gate: threading.Event):
        self.gate = gate

    def echo(self, value):
        return value

    def fail(self):
        raise ValueError("refused on purpose")

    def park(self) -> str:
        self.gate.wait(WAIT_S)
        return "released"


@pytest.fixture
def pair():
    """(server node serving `svc`, client node, the gate `park` waits on)."""
    gate = threading.Event()
    server, client = Node().start(), Node(FAST_LIVENESS).start()
    server.host("svc", Service, (gate,))
    try:
        yield server, client, gate
    finally:
        gate.set()
        client.stop()
        server.stop()


def _call(client: Node, server: Node, method: str, timeout_s: float = WAIT_S):
    return client.call(server.address, "svc", method, (), timeout_s=timeout_s)


def test_call_stats_replies_and_errors_are_counted_and_timed(pair):
    server, client, _ = pair
    for i in range(20):
        assert client.call(server.address, "svc", "echo", (i,)).result(WAIT_S) == i
    with pytest.raises(ValueError, match="refused on purpose"):
        _call(client, server, "fail").result(WAIT_S)
    stats = client.stats
    assert stats.call_outcomes() == {"ok": 20, "error": 1, "timeout": 0, "peer_unavailable": 0}
    latency = stats.latency_snapshot()
    assert latency["count"] == 21
    assert 0 < latency["sum_s"] < WAIT_S * 21
    assert latency["buckets"][max(latency["buckets"])] <= 21  # cumulative, never above count
    # The callee's node made no calls: its outcome counters and histogram stay empty.
    assert server.stats.latency_snapshot()["count"] == 0
    assert server.stats.calls_received == 21


def test_call_stats_deadline_counts_a_timeout_without_timing_it(pair, wait_until):
    server, client, gate = pair
    with pytest.raises(DeadlineExceededError):
        _call(client, server, "park", timeout_s=0.3).result(WAIT_S)
    gate.set()  # the late reply arrives and is counted as late, not as a second outcome
    wait_until(lambda: client.stats.late_replies == 1, WAIT_S, "the late reply")
    assert client.stats.call_outcomes()["timeout"] == 1
    assert client.stats.call_outcomes()["ok"] == 0
    assert client.stats.latency_snapshot()["count"] == 0


def test_call_stats_silent_peer_declared_dead_counts_peer_unavailable(pair, mute_peer):
    _, client, _ = pair
    address, _ = mute_peer
    with pytest.raises(PeerUnavailableError, match="no reply or heartbeat"):
        client.call(address, "svc", "echo", (1,), timeout_s=WAIT_S).result(WAIT_S)
    assert client.stats.call_outcomes() == {"ok": 0, "error": 0, "timeout": 0,
                                            "peer_unavailable": 1}
    assert client.stats.peers_declared_dead == 1
    assert client.stats.latency_snapshot()["count"] == 0


def test_call_stats_connection_closed_mid_call_counts_peer_unavailable(mute_peer,
                                                                    wait_until):
    address, router = mute_peer
    # Liveness slower than the test: the call can only fail through the lost connection.
    with Node(NodeConfig(peer_dead_after_s=WAIT_S * 2)) as client:
        fut = client.call(address, "svc", "echo", (1,), timeout_s=WAIT_S * 2)
        assert router.poll(WAIT_S * 1000), "the call never reached the mute peer"
        router.close(linger=0)  # the connection drops while the call waits for its reply
        with pytest.raises(PeerUnavailableError, match="connection was lost"):
            fut.result(_LOST_CONNECTION_S)
        wait_until(lambda: client.stats.calls_peer_unavailable == 1, WAIT_S,
                   "the lost call to be counted")
        assert client.stats.call_outcomes()["ok"] == 0
        assert client.stats.latency_snapshot()["count"] == 0


def test_call_stats_casts_have_no_outcome(pair, wait_until):
    server, client, _ = pair
    client.call(server.address, "svc", "echo", (1,), oneway=True).result(WAIT_S)
    assert client.call(server.address, "svc", "echo", (2,)).result(WAIT_S) == 2
    wait_until(lambda: server.stats.calls_received == 2, WAIT_S, "both calls to arrive")
    assert client.stats.calls_sent == 2
    assert sum(client.stats.call_outcomes().values()) == 1
    assert "calls_ok" not in client.stats.as_dict()  # traffic counters stay separate
