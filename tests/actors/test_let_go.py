"""Node.let_go: an idle connection to a peer is closed (its descriptor given back, here and
at the peer), a busy one is kept, and the next call connects afresh."""

from __future__ import annotations

import threading

from iris.actors import Node, NodeConfig, actor

GATE = threading.Event()  # the server runs in this process: the test opens it


@actor
class Slow:
    def echo(self, x):
        return x

    def held(self):
        GATE.wait(60)
        return "released"


def _peers(node: Node) -> set[str]:
    done = threading.Event()
    out: list = []
    node.call_in_loop(lambda: (out.append(set(node.io.peers)), done.set()))
    assert done.wait(30)
    return out[0]


def test_an_idle_connection_is_closed_and_the_next_call_opens_it_again():
    server, client = Node(NodeConfig()).start(), Node(NodeConfig()).start()
    try:
        server.host("slow", Slow)
        assert client.call(server.address, "slow", "echo", (1,)).result(30) == 1
        client.let_go(3600.0, server.address)  # heard from just now: kept
        assert server.address in _peers(client)
        client.let_go(0.0, server.address)
        assert server.address not in _peers(client)
        assert client.call(server.address, "slow", "echo", (2,)).result(30) == 2
        assert server.address in _peers(client)
    finally:
        client.stop()
        server.stop()


def test_a_connection_owed_a_reply_is_kept():
    server, client = Node(NodeConfig()).start(), Node(NodeConfig()).start()
    try:
        server.host("slow", Slow)
        waiting = client.call(server.address, "slow", "held", timeout_s=60)
        client.let_go(0.0)  # every peer: this one is owed an answer
        assert server.address in _peers(client)
        GATE.set()  # the held call's answer still arrives
        assert waiting.result(30) == "released"
    finally:
        client.stop()
        server.stop()
