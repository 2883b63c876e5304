"""Actor tier: a message an actor posts to itself (a reply to its own call, executor work)
runs as a turn of that actor, in mailbox order, on its thread; a failing one is logged and
the actor carries on; a stopped actor takes none."""

from __future__ import annotations

import threading

from iris.actors import Node, NodeConfig, actor

KEY = "/test/poster"


@actor
class Poster:
    def __init__(self):
        self.seen: list[tuple[str, str]] = []  # (what, thread name)
        self.done = threading.Event()

    def record(self, what: str) -> int:
        self.seen.append((what, threading.current_thread().name))
        if what == "last":
            self.done.set()
        return len(self.seen)

    def boom(self) -> None:
        raise RuntimeError("a bad message")


def test_posted_messages_run_on_the_actor_thread_in_mailbox_order_between_calls():
    with Node(NodeConfig(bind="tcp://127.0.0.1:0")) as node:
        hosted = node.host(KEY, Poster)
        poster = hosted.instance
        assert node.call(node.address, KEY, "record", ("call-1",)).result(30) == 1
        assert node.post_to(KEY, poster.record, "posted")
        assert node.call(node.address, KEY, "record", ("call-2",)).result(30) == 3
        assert hosted.post(poster.record, "last")
        assert poster.done.wait(30)
        assert [w for w, _ in poster.seen] == ["call-1", "posted", "call-2", "last"]
        assert {t for _, t in poster.seen} == {f"iris-actor-{KEY}"}


def test_a_posted_message_that_raises_is_logged_and_the_actor_keeps_serving(caplog):
    with Node(NodeConfig(bind="tcp://127.0.0.1:0")) as node:
        hosted = node.host(KEY, Poster)
        assert hosted.post(hosted.instance.boom)
        assert node.call(node.address, KEY, "record", ("after",)).result(30) == 1
        assert "a bad message" in caplog.text


def test_posting_to_an_actor_that_is_gone_is_refused():
    with Node(NodeConfig(bind="tcp://127.0.0.1:0")) as node:
        hosted = node.host(KEY, Poster)
        node.unhost(KEY)
        assert node.post_to(KEY, print, "never") is False
        assert hosted.post(print, "never") is False
