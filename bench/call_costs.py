"""Each cost on the path of an actor call, in microseconds, measured piece by piece.

    python -m bench.call_costs [--quick]

Not the end-to-end benchmark (bench/actors.py): this times the steps of one call in
isolation, each as the best of many short repeats (the least disturbed by a
loaded machine), so a reader can see where the end-to-end figure goes and a change to one
step can be judged by itself. Steps, in path order (docs/architecture.md, "What a call
costs", lists them with the end-to-end figures):

- caller: encode a CALL (16-byte argument); make and complete an ActorFuture;
- caller's loop: the deadline heap push; a frame sent through pyzmq's sugar send and
  through its backend's; "anything waiting?" by a recv that fails (Again) and by ZMQ_EVENTS;
- callee's loop: decode and check the CALL header; dispatch it to a sync method's mailbox
  (the method's role checked, the waiting-calls bound checked); the stall bookkeeping of a
  peer heard from (Peer.heard); the latency histogram;
- callee's thread: decode the arguments; encode the REPLY; caller's loop: decode the REPLY;
- hand-offs between two Python threads, a round trip: threading.Lock (wakes the other while
  holding the GIL) against wakers.Waker (an eventfd written with the GIL released);
- 64 MiB: bytes(view) into fresh memory against copies.to_bytes (huge pages); a warm
  shared-memory segment refilled; a receiver's map of a segment, copied out, unmapped.

The last line is one JSON object of every figure (us; *_ms in ms).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import sys
import threading
import time
import timeit

import zmq

import iris
from iris.actors import shm, shm_map, wakers
from iris.actors.future import ActorFuture
from iris.actors.hosting import HostedActor, requires, spec_of
from iris.actors.node import Node
from iris.actors.peers import DeadlineQueue, LocalPeer
from iris.base.histogram import Histogram
from iris.wire import copies, messages

SMALL = b"0123456789abcdef"
BIG = 64 * 2**20


def best_us(fn, number: int, repeat: int) -> float:
    """Best (least disturbed) of `repeat` timings of `number` calls, in us a call."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def best_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


# ---------------------------------------------------------------- pure steps


def codec_steps(n: int, r: int) -> dict:
    header = messages.encode_call(7, "/echo", "echo", 300_000, (SMALL,), {})[0]
    msg = messages.decode(header, [])
    call = messages.call_from(msg, [])
    reply = messages.encode_reply(7, SMALL)[0]
    return {
        "encode_call_us": best_us(
            lambda: messages.encode_call(7, "/echo", "echo", 300_000, (SMALL,), {}), n, r),
        "decode_call_us": best_us(
            lambda: messages.call_from(messages.decode(header, []), []), n, r),
        "call_arguments_us": best_us(lambda: messages.call_arguments(call), n, r),
        "encode_reply_us": best_us(lambda: messages.encode_reply(7, SMALL), n, r),
        "decode_reply_us": best_us(lambda: messages.decode_payload(
            *messages.decode(reply, [])[3:5], []), n, r),
        "future_us": best_us(lambda: ActorFuture("a", "m", "x", 1).set_result(1), n, r),
    }


def bookkeeping_steps(n: int, r: int) -> dict:
    node = Node()  # never started: its peers and stats are plain objects
    peer = LocalPeer(node.io)
    queue = DeadlineQueue()
    ids = iter(range(10**9))
    hist = Histogram()
    try:
        return {
            "deadline_push_us": best_us(lambda: queue.push(300.0, next(ids), peer), n, r),
            "peer_heard_us": best_us(lambda: peer.heard(1.0), n, r),
            "histogram_us": best_us(lambda: hist.observe(0.0002), n, r),
        }
    finally:
        node._ctx.destroy(linger=0)
        node.loop.close()


def dispatch_steps(n: int, r: int) -> dict:
    """HostedActor.dispatch of a call to a sync method (the instance is never started: the
    calls only land in its mailbox, which is emptied between repeats)."""
    @iris.actor
    class Echo:
        def echo(self, x):
            return x

        @requires("member")
        def guarded(self, x):
            return x

    node = Node()
    hosted = HostedActor(node, "/echo", spec_of(Echo), (), {})
    node.defer_wakes = lambda due: None  # no loop runs here

    def calls(method: str, role: str):
        msg = messages.decode(messages.encode_call(7, "/echo", method, 300_000, (SMALL,), {})[0],
                              [])
        call = messages.call_from(msg, [])
        call.role = role

        def one():
            hosted.dispatch(b"rid", call, 1e9)
            hosted._queue._items.clear()

        return one

    try:
        return {"dispatch_us": best_us(calls("echo", "client"), n, r),
                "dispatch_role_checked_us": best_us(calls("guarded", "member"), n, r)}
    finally:
        node._ctx.destroy(linger=0)
        node.loop.close()


# ---------------------------------------------------------------- sockets


def zmq_steps(n: int, r: int) -> dict:
    ctx = zmq.Context()
    dealer, router = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
    for sock in (dealer, router):
        sock.setsockopt(zmq.SNDHWM, 0)  # no limit: the timed sends must never block
        sock.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    backend_send, nb = zmq.backend.Socket.send, int(zmq.NOBLOCK)

    idle = ctx.socket(zmq.ROUTER)  # nothing ever arrives: every recv fails
    idle.bind_to_random_port("tcp://127.0.0.1")

    def again():
        try:
            idle.recv(nb, copy=False)
        except zmq.Again:
            pass

    try:
        return {
            "zmq_sugar_send_us": best_us(lambda: dealer.send(SMALL, nb, copy=True), n, r),
            "zmq_backend_send_us": best_us(lambda: backend_send(dealer, SMALL, nb, True), n, r),
            "zmq_recv_again_us": best_us(again, n, r),
            "zmq_events_us": best_us(lambda: zmq.backend.Socket.get(idle, zmq.EVENTS), n, r),
        }
    finally:
        ctx.destroy(linger=0)


# ---------------------------------------------------------------- hand-offs


def handoff_steps(rounds: int, r: int) -> dict:
    """A round trip between two threads: the main thread wakes the other, which wakes it
    back (each side does a little Python, as a loop or an actor would)."""
    def lock_round_trips() -> float:
        go, back = threading.Lock(), threading.Lock()
        go.acquire()
        back.acquire()

        def other():
            for _ in range(rounds):
                go.acquire()
                back.release()

        return _time_round_trips(other, lambda: (go.release(), back.acquire()), rounds)

    def waker_round_trips() -> float:
        go, back = wakers.Waker(), wakers.Waker()

        def other():
            for _ in range(rounds):
                go.wait(None)
                back.wake()

        try:
            return _time_round_trips(other, lambda: (go.wake(), back.wait(None)), rounds)
        finally:
            go.close()
            back.close()

    return {"handoff_lock_us": min(lock_round_trips() for _ in range(r)),
            "handoff_waker_us": min(waker_round_trips() for _ in range(r))}


def _time_round_trips(other, one, rounds: int) -> float:
    thread = threading.Thread(target=other)
    thread.start()
    t0 = time.perf_counter()
    for _ in range(rounds):
        one()
    elapsed = time.perf_counter() - t0
    thread.join()
    return elapsed / rounds * 1e6


# ---------------------------------------------------------------- 64 MiB


def big_steps(r: int) -> dict:
    payload = os.urandom(1024) * (BIG // 1024)
    view = memoryview(payload)
    segment = shm.Segment(BIG)
    try:
        segment.fill([payload], [BIG])
        out = {"copy_bytes_fresh_ms": best_ms(lambda: bytes(view), r),
               "copy_bytes_huge_ms": best_ms(lambda: copies.to_bytes(view), r),
               "shm_refill_warm_ms": best_ms(lambda: segment.fill([payload], [BIG]), r)}
        out["shm_map_read_unmap_ms"] = best_ms(lambda: _read_mapping(segment.fd), r)
        return out
    finally:
        segment.close()


def _read_mapping(fd: int) -> None:
    """Map the segment as a receiver does, copy its payload out, unmap."""
    size = os.fstat(fd).st_size
    address = shm_map._mmap(fd, size, mmap.PROT_READ)
    try:
        view = memoryview((ctypes.c_char * size).from_address(address)).cast("B")
        copies.to_bytes(view[shm._DATA_OFFSET:])
        view.release()
    finally:
        shm_map._libc.munmap(address, size)


# ---------------------------------------------------------------- report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (< 1 min)")
    args = parser.parse_args(argv)
    # Many short repeats: on a loaded machine the best of them is an undisturbed stretch.
    n, r = (2_000, 5) if args.quick else (2_000, 30)
    figures: dict = {}
    for name, step in (("codec", lambda: codec_steps(n, r)),
                       ("bookkeeping", lambda: bookkeeping_steps(n, r)),
                       ("dispatch", lambda: dispatch_steps(n, r)),
                       ("zmq", lambda: zmq_steps(n, r)),
                       ("hand-offs", lambda: handoff_steps(n // 4, min(r, 5))),
                       ("64 MiB", lambda: big_steps(min(r, 5)))):
        print(f"  measuring {name} ...", file=sys.stderr, flush=True)
        figures.update(step())
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:{width}}  {value:10.3f}")
    figures.update(quick=args.quick, load_1m=os.getloadavg()[0])
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in figures.items()}))


if __name__ == "__main__":
    main()
