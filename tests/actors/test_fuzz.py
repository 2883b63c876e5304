"""Bad input at a live ROUTER: random and mutated frames are dropped; the node keeps serving."""

from __future__ import annotations

import random

import msgpack
import zmq

import iris
from iris.wire import messages


@iris.actor
class Echo:
    def echo(self, value):
        return value


def mutations(rng: random.Random, valid: list[bytes]):
    """Yield frame lists: pure noise, truncations, bit flips, wrong types, bogus kinds."""
    kinds = [
        lambda: [rng.randbytes(rng.randint(0, 64))],
        lambda: [rng.randbytes(rng.randint(0, 8)) for _ in range(rng.randint(1, 6))],
        lambda: [valid[0][: rng.randint(0, len(valid[0]))]],
        lambda: [_flip(rng, valid[0])],
        lambda: [msgpack.packb([1, rng.randint(-5, 300), rng.random(), "x"])],
        lambda: [msgpack.packb([1, messages.CALL, rng.randint(0, 9), rng.randint(0, 9),
                                None, -1, 0, [[], {}]])],
        lambda: [msgpack.packb([1, messages.CALL, 1, "/fuzz-echo", "echo", 1000, 1,
                                rng.randbytes(30)])],  # pickle format carrying garbage
        lambda: [msgpack.packb([1, messages.CALL, 1, "/fuzz-echo", "echo", 1000, 0,
                                [rng.random(), {"k": 1}]])],  # args not a list
        lambda: [valid[0], *[b"x"] * rng.randint(1, 5)],  # stray buffer frames
        lambda: [msgpack.packb([1, messages.REPLY, 1, 0, None])],  # reply sent to a ROUTER
        lambda: [msgpack.packb([rng.randint(2, 99), messages.PING, 1])],  # future version
    ]
    while True:
        yield rng.choice(kinds)()


def _flip(rng: random.Random, data: bytes) -> bytes:
    mutable = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        mutable[rng.randrange(len(mutable))] ^= 1 << rng.randrange(8)
    return bytes(mutable)


def test_fuzz_ten_thousand_bad_frames_then_node_still_serves(cluster):
    ref = Echo.serve("fuzz-echo")
    node = cluster.node
    valid = messages.encode_call(1, "/fuzz-echo", "echo", 1000, ("ok",), {})
    rng = random.Random(20261121)
    ctx = zmq.Context()
    attacker = ctx.socket(zmq.DEALER)
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.connect(node.address)
    try:
        for sent, frames in enumerate(mutations(rng, valid), start=1):
            attacker.send_multipart(frames)
            if sent % 500 == 0:  # keep queues shallow; drain whatever answers came back
                while attacker.poll(0):
                    attacker.recv_multipart()
            if sent >= 10_000:
                break
        assert ref.echo("still alive").result(60) == "still alive"
        assert node.stats.malformed > 3_000  # most were dropped and counted, none crashed it
        # A well-formed call on the same socket still gets a proper reply.
        attacker.send_multipart(messages.encode_call(424242, "/fuzz-echo", "echo", 5000,
                                                     ("after",), {}))
        for _ in range(10_000):
            assert attacker.poll(30_000), "no reply to a valid call after the fuzzing"
            reply = messages.decode(attacker.recv(), [])
            if reply[1] == messages.REPLY and reply[2] == 424242:
                break
        assert reply[4] == "after"
    finally:
        attacker.close()
        ctx.term()


def test_oversized_frame_never_reaches_the_node_and_it_keeps_serving(cluster_small_frames):
    node = cluster_small_frames.node
    ref = Echo.serve("big-echo")
    ctx = zmq.Context()
    attacker = ctx.socket(zmq.DEALER)
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.connect(node.address)
    try:
        attacker.send_multipart([b"x" * (2 << 20)])  # 2 MiB against a 1 MiB limit
        assert ref.echo("fine").result(60) == "fine"
        # libzmq cut the sender off before delivery: we saw one call (ours), no garbage.
        assert node.stats.calls_received == 2 and node.stats.malformed == 0
    finally:
        attacker.close()
        ctx.term()
