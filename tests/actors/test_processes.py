"""Cluster tier: actors in separate processes — resolution, refs across processes, dead peers."""

from __future__ import annotations

import os
import threading

import pytest

import iris

SERVE = """
import os, sys, threading
import iris

@iris.actor
class Svc:
    def ping(self, x):
        return x
    def pid(self):
        return os.getpid()
    def slow(self, seconds):
        threading.Event().wait(seconds)
        return seconds
    def call_other(self, ref, x):
        return ref.ping(x).result(30)

ctx = iris.connect()
Svc.serve(os.environ["SVC_NAME"])
print("READY", ctx.node.address, flush=True)
threading.Event().wait()
"""


def serve_in_child(child_process, cluster, name: str, bind: str | None = None):
    env = {"IRIS_ADDRESS": cluster.address, "SVC_NAME": name}
    if bind:
        env["IRIS_BIND"] = bind
    child = child_process(SERVE, env)
    address = child.wait_ready()
    return child, address


def test_actor_in_another_process_resolves_and_answers(cluster, child_process):
    child, address = serve_in_child(child_process, cluster, "svc")
    ref = iris.resolve("svc", timeout=30)
    assert ref.address == address
    assert ref.ping({"a": [1, 2]}).result(30) == {"a": [1, 2]}
    assert ref.pid().result(30) == child.proc.pid


def test_ref_passed_as_argument_is_usable_in_the_other_process(cluster, child_process):
    serve_in_child(child_process, cluster, "first")
    serve_in_child(child_process, cluster, "second")
    first, second = iris.resolve("first"), iris.resolve("second")
    assert second.call_other(first, "hello").result(30) == "hello"


def test_resolve_waits_for_a_name_that_appears_later(cluster, child_process):
    result = {}
    ctx = iris.current()
    waiter = threading.Thread(
        target=lambda: result.setdefault("ref", ctx.resolve("late", 60)))
    waiter.start()
    serve_in_child(child_process, cluster, "late")
    waiter.join(90)
    assert result["ref"].name == "/late"


def test_pending_call_on_a_killed_peer_fails_instead_of_hanging(cluster, child_process):
    child, _ = serve_in_child(child_process, cluster, "victim")
    ref = iris.resolve("victim")
    in_flight = [ref.slow(120) for _ in range(200)]
    child.kill()
    for fut in in_flight:  # every queued and running call surfaces an error; none vanish
        with pytest.raises(iris.PeerUnavailableError):
            fut.result(timeout=30)


def test_silent_peer_is_declared_dead_by_heartbeat(cluster, child_process):
    child, _ = serve_in_child(child_process, cluster, "frozen")
    ref = iris.resolve("frozen")
    assert ref.ping(1).result(30) == 1
    os.killpg(child.proc.pid, 19)  # SIGSTOP: the socket stays open but nothing answers
    try:
        with pytest.raises(iris.PeerUnavailableError, match="no reply or heartbeat"):
            ref.ping(2).result(timeout=30)
    finally:
        os.killpg(child.proc.pid, 18)  # SIGCONT so the fixture can reap it


def test_names_of_a_dead_process_disappear_from_the_registry(cluster, child_process):
    child, _ = serve_in_child(child_process, cluster, "ephemeral")
    assert len(iris.resolve_all("ephemeral")) == 1
    child.kill()
    for _ in range(600):  # leases run out within 3 s; poll the registry, bounded
        if len(iris.resolve_all("ephemeral")) == 0:
            break
        threading.Event().wait(0.05)
    assert len(iris.resolve_all("ephemeral")) == 0


def test_ref_reresolves_after_its_actor_moves_to_a_new_process(cluster, child_process):
    first, old_address = serve_in_child(child_process, cluster, "mover")
    ref = iris.resolve("mover")
    assert ref.pid().result(30) == first.proc.pid
    first.kill()
    with pytest.raises(iris.PeerUnavailableError):
        ref.pid().result(30)
    for _ in range(600):  # the dead lease runs out, then the replacement registers
        if len(iris.resolve_all("mover")) == 0:
            break
        threading.Event().wait(0.05)
    second, new_address = serve_in_child(child_process, cluster, "mover", bind=old_address)
    assert new_address == old_address  # same port: zmq reconnects the same peer
    assert ref.pid().result(30) == second.proc.pid
