"""Thread hand-offs (iris/actors/wakers.py) and the futures that sleep on them: nothing put
is lost or reordered, a sleeper is woken by a put or a result from any thread, and a wake
left over from an earlier wait never ends a later one early."""

from __future__ import annotations

import os
import threading
from queue import Empty

import pytest

from iris.actors import wakers
from iris.actors.future import ActorFuture


def test_mailbox_keeps_every_item_of_every_producer_in_order():
    box = wakers.Mailbox()
    producers, per = 4, 5_000
    got: list = []

    def take() -> None:
        for _ in range(producers * per):
            got.append(box.get())

    taker = threading.Thread(target=take)
    taker.start()
    threads = [threading.Thread(target=lambda p=p: [box.put((p, i)) for i in range(per)])
               for p in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    taker.join(60)
    assert not taker.is_alive() and len(got) == producers * per
    for p in range(producers):
        assert [i for q, i in got if q == p] == list(range(per))
    assert box.empty() and box.qsize() == 0


def test_mailbox_get_with_timeout_raises_empty_when_nothing_comes():
    box = wakers.Mailbox()
    with pytest.raises(Empty):
        box.get(timeout=0.05)
    box.put("x")
    assert box.get(timeout=0.05) == "x"


def test_mailbox_put_wakes_a_sleeping_taker_now_or_when_the_loop_says(wait_until):
    box = wakers.Mailbox()
    got: list = []
    taker = threading.Thread(target=lambda: [got.append(box.get()) for _ in range(2)])
    taker.start()
    wait_until(lambda: box._sleeping, 60, "the taker to sleep")
    box.put(1)  # woken now
    wait_until(lambda: got == [1] and box._sleeping, 60, "the taker to sleep again")
    deferred: list = []
    box.put(2, defer=deferred.extend)  # a loop thread's put: the wake is handed over
    assert len(deferred) == 1
    deferred[0].wake()
    taker.join(60)
    assert got == [1, 2] and not taker.is_alive()


def test_future_waiter_in_another_thread_is_woken_by_its_result():
    fut = ActorFuture("a", "m", "tcp://x")
    out: list = []
    waiter = threading.Thread(target=lambda: out.append(fut.result(timeout=60)))
    waiter.start()
    fut.set_result(42)
    waiter.join(60)
    assert out == [42]


def test_future_wait_is_not_ended_by_a_wake_left_from_before():
    wakers.this_thread().wake()  # as if an earlier future finished after its wait timed out
    fut = ActorFuture("a", "m", "tcp://x")
    with pytest.raises(TimeoutError, match="still pending"):
        fut.result(timeout=0.05)
    threading.Timer(0.05, fut.set_result, ("late",)).start()
    assert fut.result(timeout=60) == "late"


def test_future_timed_out_wait_leaves_no_waiter_behind():
    fut = ActorFuture("a", "m", "tcp://x")
    with pytest.raises(TimeoutError):
        fut.result(timeout=0.01)
    assert not fut._waiters
    fut.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        fut.result(timeout=1)


def test_waker_without_eventfd_uses_a_pipe(monkeypatch):
    monkeypatch.delattr(os, "eventfd")  # as on a system that is not Linux
    waker = wakers.Waker()
    assert not waker.wait(0.01)
    waker.wake()
    waker.wake()
    assert waker.wait(1.0) and not waker.wait(0.01)  # both wakes read at once
    box = wakers.Mailbox()
    threading.Timer(0.02, box.put, ("x",)).start()
    assert box.get() == "x"
    waker.close()
