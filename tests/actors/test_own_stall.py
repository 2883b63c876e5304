"""Actor tier: a node whose own process stood still (SIGSTOP: a stopped VM, a starved or
swapped-out process) does not blame its peers for the silence it could not hear. A peer
that answered while the caller was stopped past `peer_dead_after_s` is not declared dead,
and the call gets its answer; over real sockets, the caller a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from iris.actors import Node, NodeConfig, actor

KEY = "/test/slow-echo"
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
