"""Inbox: messages from other threads run on the actor's turn, in order, waking it once."""

from __future__ import annotations

import threading

from iris.worker.inbox import Inbox


def test_messages_run_only_at_drain_in_the_order_posted():
    ran: list[int] = []
    inbox = Inbox(wake=lambda: None)
    for n in range(3):
        inbox.post(ran.append, n)
    assert ran == []
    assert inbox.drain() == 3
    assert ran == [0, 1, 2]
    assert inbox.drain() == 0


def test_urgent_messages_wake_the_actor_once_until_it_drains():
    wakes: list[None] = []
    inbox = Inbox(wake=lambda: wakes.append(None))
    inbox.post(lambda: None, urgent=False)
    assert wakes == []
    inbox.post(lambda: None, urgent=True)
    inbox.post(lambda: None, urgent=True)
    assert len(wakes) == 1
    inbox.drain()
    inbox.post(lambda: None, urgent=True)
    assert len(wakes) == 2


def test_a_failing_message_is_logged_and_the_rest_still_run(caplog):
    ran: list[str] = []
    inbox = Inbox(wake=lambda: None)
    inbox.post(lambda: 1 / 0)
    inbox.post(ran.append, "after")
    assert inbox.drain() == 2
    assert ran == ["after"] and "ZeroDivisionError" in caplog.text


def test_messages_posted_from_many_threads_all_run_on_the_draining_thread():
    seen: list[int] = []
    inbox = Inbox(wake=lambda: None)
    threads = [threading.Thread(target=lambda: [inbox.post(
        lambda: seen.append(threading.get_ident())) for _ in range(100)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    inbox.drain()
    assert seen == [threading.get_ident()] * 400
