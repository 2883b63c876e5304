"""Actor tier: the bulk path's receiver against a hostile sender, on real sockets.

A weights Subscriber (the receiver) is attached to a transfer whose chunks come from a fake
bulk server run by the test: a raw pyzmq ROUTER that speaks the bulk protocol and seals
chunks with the real crypto, then tampers with them, replays them, reorders them or cuts
them short. Each must be refused with a clear error, and the version never delivered.
"""

from __future__ import annotations

import threading

import msgpack
import numpy as np
import pytest
import zmq

import iris
from iris.actors import ClusterContext, Node, NodeConfig, Registry, bulk, bulk_serve
from iris.actors.bulk_seal import AES_GCM, PLAIN, BulkError, ChunkKey, cpu_has_aes
from iris.actors.config import BulkConfig
from iris.actors.registry import REGISTRY_KEY
from iris.actors.relay import RelayError
from iris.wire import messages

MiB = 1 << 20
CHUNK = 64 * 1024


@pytest.fixture
def node_cluster():
    node = Node(NodeConfig(bulk=BulkConfig(streams=2, credits=2))).start()
    node.host(REGISTRY_KEY, Registry)
    with ClusterContext(node, node.address, owns_node=True) as ctx:
        yield ctx


@pytest.fixture
def subscriber(node_cluster):
    pub = iris.weights.Publisher("policy")
    sub = iris.weights.Subscriber("policy")
    yield sub
    sub.close()
    pub.close()


def payload(version: int) -> dict:
    return {"w": np.arange(MiB // 4, dtype=np.float32) + float(version)}  # 16 chunks of 64 KiB


class FakeSender:
    """A bulk server that seals `value` with its own key and answers requests as
    `serve(k)` says: a list of (header index, sealed bytes) replies for the request of k."""

    def __init__(self, value, tid: str, algorithm: str = AES_GCM):
        header, *buffers = messages.encode_reply(0, value)
        self.layout = bulk.Layout(buffers, CHUNK)
        self.key = ChunkKey.new(algorithm, tid, self.layout.total, CHUNK)
        self.meta = {"tid": tid, "header": header, "spans": self.layout.spans,
                     "total": self.layout.total, "chunk": CHUNK, "version": 1}
        self.token = b"t" * bulk_serve.TOKEN_BYTES
        self.serve = lambda k: [(k, self.sealed(k))]
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sealed(self, k: int) -> bytes:
        return bytes(self.key.seal(k, self.layout.plain_chunk(k)))

    def grant(self) -> list:
        return [self.endpoint, self.token, self.key.algorithm, self.key.secret()]

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._sock.poll(50):
                continue
            rid, raw = self._sock.recv_multipart()
            tid, token, k = msgpack.unpackb(raw)
            assert token == self.token and tid == self.meta["tid"]
            for index, data in self.serve(k):
                self._sock.send_multipart([rid, msgpack.packb([index, bulk_serve.OK]), data])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sock.close(0)
        self._ctx.term()


@pytest.fixture
def fake_sender():
    made = []

    def make(*args, **kwargs) -> FakeSender:
        made.append(FakeSender(*args, **kwargs))
        return made[-1]

    yield make
    for sender in made:
        sender.close()


def push(sub, sender: FakeSender):
    """Attach the subscriber to the fake sender's transfer; finish()'s future."""
    node = iris.current().node
    address, key = node.address, sub._ctx.full_name(sub._rollouts)
    node.call(address, key, "attach", (sender.meta, [], "tcp://fake", sender.grant()),
              timeout_s=30).result(30)
    return node.call(address, key, "finish", (sender.meta["tid"],), timeout_s=60)


def test_chunks_from_a_well_behaved_sender_are_delivered(subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1")
    assert push(subscriber, sender).result(60) == {}
    version, weights = subscriber.get(timeout=30)
    assert version == 1 and np.array_equal(weights["w"], payload(1)["w"])
    assert not weights["w"].flags.writeable


def refused(sub, sender: FakeSender, match: str) -> None:
    with pytest.raises(BulkError, match=match):
        push(sub, sender).result(60)
    assert sub.version == 0 and sub._box.weights is None  # nothing delivered


def test_a_tampered_chunk_is_refused_and_the_version_not_delivered(subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1")

    def flip_a_bit(k):
        data = bytearray(sender.sealed(k))
        if k == 5:
            data[100] ^= 1
        return [(k, bytes(data))]

    sender.serve = flip_a_bit
    refused(subscriber, sender, "chunk 5 .* failed authentication")


def test_a_replayed_chunk_is_refused_and_the_version_not_delivered(subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1")
    # Two streams: chunks 0, 2, 4, ... ask on one. Chunk 2's reply comes again in place of 4.
    sender.serve = lambda k: [(2, sender.sealed(2))] if k == 4 else [(k, sender.sealed(k))]
    refused(subscriber, sender, "chunk 2 .* out of order, twice")


def test_a_chunk_from_another_transfer_is_refused(subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1")
    old = fake_sender(payload(0), "fake/policy@1")  # same id and position, another key
    sender.serve = lambda k: [(k, old.sealed(k) if k == 3 else sender.sealed(k))]
    refused(subscriber, sender, "chunk 3 .* failed authentication")


def test_reordered_chunks_are_refused(subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1")
    sender.serve = lambda k: ([(6, sender.sealed(6))] if k == 4 else
                              [(4, sender.sealed(4))] if k == 6 else [(k, sender.sealed(k))])
    refused(subscriber, sender, "chunk 6 .* out of order")


def test_a_chunk_moved_to_another_position_fails_authentication(subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1")
    sender.serve = lambda k: [(k, sender.sealed(7 if k == 6 else k))]  # 7's bytes, labeled 6
    refused(subscriber, sender, "chunk 6 .* failed authentication")


def test_a_truncated_chunk_is_refused(subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1")
    sender.serve = lambda k: [(k, sender.sealed(k)[:-1] if k == 2 else sender.sealed(k))]
    refused(subscriber, sender, "chunk 2 .* bytes, not")


def test_a_plaintext_transfer_is_refused_by_a_node_that_does_not_allow_it(
        subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1", algorithm=PLAIN)
    with pytest.raises(BulkError, match="plaintext and this node does not allow it"):
        push(subscriber, sender)
    assert subscriber.version == 0


def test_a_plaintext_transfer_is_delivered_where_plaintext_was_chosen(fake_sender):
    node = Node(NodeConfig(bulk=BulkConfig(plaintext=True))).start()
    node.host(REGISTRY_KEY, Registry)
    with ClusterContext(node, node.address, owns_node=True):
        pub = iris.weights.Publisher("policy")
        sub = iris.weights.Subscriber("policy")
        sender = fake_sender(payload(1), "fake/policy@1", algorithm=PLAIN)
        assert push(sub, sender).result(60) == {}
        version, weights = sub.get(timeout=30)
        assert version == 1 and np.array_equal(weights["w"], payload(1)["w"])
        sub.close()
        pub.close()


@pytest.mark.parametrize("bad, field", [
    ({"tid": 3}, "meta.tid"), ({"total": "x"}, "meta.total"), ({"chunk": 0}, "chunk must be"),
    ({"spans": [[0, 1 << 40]]}, "meta.spans")])
def test_a_malformed_attach_is_refused_naming_the_field(subscriber, fake_sender, bad, field):
    sender = fake_sender(payload(1), "fake/policy@1")
    sender.meta = {**sender.meta, **bad}
    with pytest.raises(RelayError, match=field):
        push(subscriber, sender)


def test_a_malformed_grant_is_refused(subscriber, fake_sender):
    sender = fake_sender(payload(1), "fake/policy@1")
    node = iris.current().node
    key = subscriber._ctx.full_name(subscriber._rollouts)
    with pytest.raises(RelayError, match="grant: malformed"):
        node.call(node.address, key, "attach", (sender.meta, [], "x", ["udp://x", b"", "a", b""]),
                  timeout_s=30).result(30)


def test_sealing_a_chunk_again_with_other_bytes_is_refused_before_it_is_sent():
    from iris.actors.bulk_seal import Tags

    key = ChunkKey.new(AES_GCM if cpu_has_aes() else "chacha20-poly1305", "t", 2 * CHUNK,
                       CHUNK)
    tags = Tags(key)
    tags.check(1, key.seal(1, bytes(CHUNK)))
    tags.check(1, key.seal(1, bytes(CHUNK)))  # the same bytes again: the same tag
    with pytest.raises(BulkError, match="changed while it was being sent"):
        tags.check(1, key.seal(1, b"\x01" * CHUNK))


def test_the_key_never_shows_in_a_repr():
    key = ChunkKey.new(AES_GCM, "t", CHUNK, CHUNK)
    grant = bulk.Grant("tcp://x:1", b"t" * 16, AES_GCM, key.secret())
    for text in (repr(key), repr(grant), str(grant)):
        assert key.secret().hex() not in text and repr(key.secret()) not in text


def on_loop(node, fn, *args):
    """fn(*args) on the node's loop thread; its result."""
    done, box = threading.Event(), []
    node.call_in_loop(lambda: (box.append(fn(*args)), done.set()))
    assert done.wait(30)
    return box[0]


def test_the_bulk_server_gives_chunks_only_for_the_right_token(node_cluster):
    node = node_cluster.node
    header, *buffers = messages.encode_reply(0, payload(1))
    layout = bulk.Layout(buffers, CHUNK)
    offer = bulk.SealingOffer("t1", layout, node.bulk.new_key("t1", layout.total, CHUNK),
                              node.bulk)
    grant = on_loop(node, node.bulk.offer, offer)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    try:
        dealer.connect(grant.endpoint)
        dropped = node.bulk.dropped_requests
        for request in (b"\x93", msgpack.packb(["t1", grant.token, "zero"]),
                        msgpack.packb(["t1", grant.token, 10_000])):  # malformed: no answer
            dealer.send(request)
        dealer.send(msgpack.packb(["t1", b"x" * 16, 0]))  # a wrong token: GONE, no bytes
        dealer.send(msgpack.packb(["t1", grant.token, 0]))  # right: the sealed chunk
        assert dealer.poll(30_000)
        gone = dealer.recv_multipart()
        assert len(gone) == 1 and msgpack.unpackb(gone[0])[:2] == [0, bulk_serve.GONE]
        assert dealer.poll(30_000)
        head, sealed = dealer.recv_multipart()
        assert msgpack.unpackb(head) == [0, bulk_serve.OK]
        assert sealed != bytes(layout.plain_chunk(0)) and len(sealed) == CHUNK + 16
        assert node.bulk.dropped_requests == dropped + 4
        on_loop(node, node.bulk.withdraw, "t1")
        dealer.send(msgpack.packb(["t1", grant.token, 1]))  # withdrawn: GONE
        assert dealer.poll(30_000)
        assert msgpack.unpackb(dealer.recv_multipart()[0])[:2] == [1, bulk_serve.GONE]
    finally:
        dealer.close(0)
        ctx.term()


@pytest.mark.parametrize("name, value", [("IRIS_BULK_STREAMS", "0"),
                                         ("IRIS_BULK_STREAMS", "two"),
                                         ("IRIS_BULK_PLAINTEXT", "yes"),
                                         ("IRIS_BULK_MIN_CALL_BYTES", "-1")])
def test_a_bad_bulk_setting_in_the_environment_is_refused_naming_it(monkeypatch, name, value):
    from iris.base.errors import ConfigError

    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        Node()


def test_plaintext_bulk_is_logged_when_a_node_starts(monkeypatch, caplog):
    monkeypatch.setenv("IRIS_BULK_PLAINTEXT", "1")
    with caplog.at_level("WARNING", logger="iris.actors.bulk"):
        node = Node()
    assert node.bulk.config.plaintext
    assert "NOT encrypted" in caplog.text


def test_a_receive_buffer_is_reused_only_once_every_view_of_it_is_gone():
    import gc

    from iris.actors.bulk_buffers import Buffers

    buffers = Buffers(keep_bytes=64 * MiB)
    first = buffers.take(4 * MiB)
    first[:5] = b"hello"
    kept = np.frombuffer(first.toreadonly(), dtype=np.uint8)[:5]  # a user's view of it
    del first
    gc.collect()
    second = buffers.take(4 * MiB)
    assert buffers.reused == 0 and bytes(kept) == b"hello"  # still held: not handed out
    del kept, second
    gc.collect()
    third = buffers.take(4 * MiB)
    assert buffers.reused == 1 and third.nbytes == 4 * MiB
    del third
    buffers.close()
