"""Actor tier: a node whose own process stood still (SIGSTOP: a stopped VM, a starved or
swapped-out process) does not blame its peers for the silence it could not hear. A peer
that answered while the caller was stopped past `peer_dead_after_s` is not declared dead,
and the call gets its answer; over real sockets, the caller a real process.

The stall is also injected, on a caller whose clock is a FakeClock: the clock jumps while the
loop runs no sweep, which the loop cannot tell from standing still; the peer is a bare
ROUTER the test answers by hand, so each step is waited for, not timed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import zmq

from iris.actors import Node, NodeConfig, actor
from iris.base.clock import FakeClock
from iris.wire import messages

KEY = "/test/slow-echo"
WAIT_S = 30.0
STALL_S = NodeConfig().peer_dead_after_s * 2  # longer than any peer may be silent
CALLER = """
import sys
from iris.actors import Node, NodeConfig
with Node(NodeConfig(bind="tcp://127.0.0.1:0")) as node:
    fut = node.call(sys.argv[1], "/test/slow-echo", "echo", (7,), timeout_s=60)
    print("sent", flush=True)
    try:
        print("answer", fut.result(60), node.stats.peers_declared_dead, flush=True)
    except Exception as exc:
        print("failed", type(exc).__name__, exc, flush=True)
"""


@actor
class SlowEcho:
    def __init__(self):
        self.called = threading.Event()

    def echo(self, n: int) -> int:
        self.called.set()
        threading.Event().wait(1.0)  # answers while its caller is stopped
        return n


def test_a_peer_that_answered_while_the_caller_was_stopped_is_not_declared_dead():
    with Node(NodeConfig(bind="tcp://127.0.0.1:0")) as server:
        hosted = server.host(KEY, SlowEcho)
        caller = subprocess.Popen([sys.executable, "-c", CALLER, server.address],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert caller.stdout.readline().strip() == "sent"
            assert hosted.instance.called.wait(60)
            os.kill(caller.pid, signal.SIGSTOP)
            threading.Event().wait(NodeConfig().peer_dead_after_s + 3)
            os.kill(caller.pid, signal.SIGCONT)
            line = caller.stdout.readline()
            assert line.split() == ["answer", "7", "0"], line  # no peer declared dead
        finally:
            os.kill(caller.pid, signal.SIGCONT)
            caller.kill()
            caller.wait(30)


def _take(router: zmq.Socket, kind: int) -> tuple[bytes, int]:
    """The next message on the bare peer, which must be of `kind`: (who sent it, its call id
    or nonce)."""
    assert router.poll(WAIT_S * 1000), f"no {messages.KIND_NAMES[kind]} within {WAIT_S} s"
    rid, header, *buffers = router.recv_multipart()
    msg = messages.decode(header, buffers)
    assert msg[1] == kind, msg
    return rid, msg[2]


def test_a_stall_before_the_first_sweep_is_the_nodes_own_not_its_peers_silence(
        mute_peer, wait_until):
    address, router = mute_peer
    clock = FakeClock()
    caller = Node(NodeConfig(), clock=clock)
    calls, stood_still = [], threading.Event()

    def call_then_stand_still():  # the loop's first work, before its first sweep
        calls.append(caller.call(address, "svc", "echo", (7,), timeout_s=WAIT_S * 4))
        clock.advance(STALL_S)
        stood_still.set()

    caller.io.post(call_then_stand_still)
    with caller:
        rid, call_id = _take(router, messages.CALL)
        assert stood_still.wait(WAIT_S)
        wait_until(lambda: caller.stats.own_stalls or calls[0].done(), WAIT_S, "a sweep")
        assert not calls[0].done(), calls[0].exception()  # the peer was not declared dead
        router.send_multipart([rid, *messages.encode_reply(call_id, 7)])
        assert calls[0].result(WAIT_S) == 7
    assert (caller.stats.own_stalls, caller.stats.peers_declared_dead) == (1, 0)


def test_after_its_own_stall_a_node_pings_a_peer_it_waits_on_before_judging_it(
        mute_peer, wait_until):
    """A peer busy in a long method answers PINGs: so after the caller's stall it is pinged
    after heartbeat_interval_s of silence as usual, not left unasked until it is judged."""
    address, router = mute_peer
    clock = FakeClock()
    config = NodeConfig()
    with Node(config, clock=clock) as caller:
        fut = caller.call(address, "svc", "echo", (7,), timeout_s=WAIT_S * 4)
        rid, call_id = _take(router, messages.CALL)
        for stalls, stall_s in ((0, 0), (1, STALL_S)):  # before the stall (the loop's sweeps
            clock.advance(stall_s)                      # are known to run then), and after
            wait_until(lambda n=stalls: caller.stats.own_stalls == n, WAIT_S, "the stall")
            clock.advance(config.heartbeat_interval_s * 2)  # < peer_dead_after_s
            rid, nonce = _take(router, messages.PING)
            router.send_multipart([rid, *messages.encode_pong(nonce)])
        router.send_multipart([rid, *messages.encode_reply(call_id, 7)])
        assert fut.result(WAIT_S) == 7
    assert (caller.stats.own_stalls, caller.stats.peers_declared_dead) == (1, 0)
