"""Actor tier: what a peer with no token can make a node do with frames it builds itself,
over real sockets. Control-plane actors (served under /iris/) never load a pickle a peer
sends, and a worker's answers are never loaded as pickles either; a flood of refused casts
or bad frames costs counters, not log lines or memory; the node serves on afterwards.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket

import msgpack
import pytest
import zmq

from iris.actors import Node, NodeConfig, actor, shm, sockio
from iris.actors.admission import MAX_CONTROL_HEADER_BYTES
from iris.actors.bulk_calls import TABLE_MAGIC
from iris.actors.hosting import requires
from iris.base.errors import NotFoundError, ProtocolError, RemoteError

CONTROL = "/iris/test-control"
WORKERISH = "/iris/workers/w-test"
USER = "/alice/thing"


class _Touch:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


class CustomError(Exception):
    pass


@actor
class Thing:
    def echo(self, value):
        return value

    def pair(self) -> tuple:
        return (1, 2)  # a tuple: sent as a pickle

    def missing(self) -> None:
        raise NotFoundError("no such attempt here")

    def custom(self) -> None:
        raise CustomError("mine")

    @requires("controller")
    def guarded(self) -> None:
        pass


@pytest.fixture
def served():
    with Node(NodeConfig(bind="tcp://127.0.0.1:0")) as server, \
            Node(NodeConfig(bind="tcp://127.0.0.1:0")) as client:
        for key in (CONTROL, WORKERISH, USER):
            server.host(key, Thing)
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(server.address)
        try:
            yield server, client, sock
        finally:
            sock.close()
            ctx.term()


def _ask(sock, head: list) -> list:
    sock.send(msgpack.packb(head))
    assert sock.poll(30_000), "no answer"
    return msgpack.unpackb(sock.recv(), raw=False)


def test_a_control_plane_actor_refuses_a_pickled_call_unread_and_a_user_actor_takes_it(
        served, tmp_path):
    server, client, sock = served
    marker = tmp_path / "loaded"
    got = _ask(sock, [1, 1, 5, CONTROL, "echo", 30_000, 1,
                      pickle.dumps(((_Touch(marker),), {}))])
    assert got[1] == 4 and got[3] == "protocol", got
    assert f"{CONTROL}.echo" in got[4] and "pickle" in got[4], got[4]
    assert not marker.exists()
    with pytest.raises(ProtocolError, match="plain msgpack"):
        client.call(server.address, CONTROL, "echo", ((1, 2),)).result(30)  # a tuple
    assert client.call(server.address, CONTROL, "echo", ([1, 2],)).result(30) == [1, 2]
    # A user's actor takes pickles, as it always did (its arguments are any objects).
    assert client.call(server.address, USER, "echo", ((1, 2),)).result(30) == (1, 2)


def test_a_workers_answers_are_read_as_plain_data_only(served):
    server, client, _ = served
    with pytest.raises(ProtocolError, match="read as plain msgpack only"):
        client.call(server.address, WORKERISH, "pair").result(30)
    # An Iris error keeps its type (the inspector waits for NotFoundError), rebuilt from
    # its name and message; any other exception is a RemoteError naming its type.
    with pytest.raises(NotFoundError, match="no such attempt here"):
        client.call(server.address, WORKERISH, "missing").result(30)
    with pytest.raises(RemoteError, match="CustomError: mine"):
        client.call(server.address, WORKERISH, "custom").result(30)
    # Elsewhere, exceptions and values travel as before.
    with pytest.raises(CustomError):
        client.call(server.address, CONTROL, "custom").result(30)
    assert client.call(server.address, USER, "pair").result(30) == (1, 2)


def test_a_flood_of_refused_casts_writes_a_few_log_lines_not_one_each(served, caplog):
    server, client, sock = served
    caplog.set_level(logging.WARNING)
    n = 3000
    for _ in range(n):  # no token: refused; a bad method: refused; a raising method
        sock.send(msgpack.packb([1, 2, 0, CONTROL, "guarded", 30_000, 0, [[], {}]]))
        sock.send(msgpack.packb([1, 2, 0, CONTROL, "nope", 30_000, 0, [[], {}]]))
        sock.send(msgpack.packb([1, 2, 0, CONTROL, "missing", 30_000, 0, [[], {}]]))
    # A call after them is answered once they were all handled (one peer, in order).
    assert _ask(sock, [1, 1, 9, CONTROL, "echo", 30_000, 0, [["after"], {}]])[4] == "after"
    assert server.stats.calls_received >= 3 * n + 1
    lines = [r for r in caplog.records if "cast" in r.getMessage()]
    assert 1 <= len(lines) <= 3, [r.getMessage() for r in lines]


def test_a_message_of_a_hundred_thousand_frames_is_dropped_keeping_a_thousand(served):
    server, _, sock = served
    malformed = server.stats.malformed
    head = msgpack.packb([1, 1, 3, CONTROL, "echo", 30_000, 0, [["big"], {}]])
    sock.send_multipart([head, *[b""] * 100_000])
    assert sock.poll(30_000)
    refused = msgpack.unpackb(sock.recv(), raw=False)  # the call is told why
    assert refused[2:4] == [3, "protocol"] and "1024" in refused[4], refused
    # The next message of the same peer is read whole: the rest of the big one was read
    # and dropped, not left behind as the start of another message.
    assert _ask(sock, [1, 1, 4, CONTROL, "echo", 30_000, 0, [["next"], {}]])[2:5] == \
        [4, 0, "next"]
    assert server.stats.malformed == malformed + 1


def test_a_socket_read_keeps_at_most_the_frames_a_message_may_carry():
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send_multipart([b"head", *[b"x"] * 50_000])
        dealer.send_multipart([b"second", b"y"])
        assert router.poll(30_000)
        _, header, rest = sockio.recv_routed(router)
        assert header == b"head" and len(rest) == sockio.MAX_KEPT_FRAMES
        assert router.poll(30_000)
        _, header, rest = sockio.recv_routed(router)
        assert header == b"second" and [bytes(f) for f in rest] == [b"y"]
    finally:
        router.close(linger=0)
        dealer.close(linger=0)
        ctx.term()


def _bulk_call(call_id: int, method: str, endpoint: str) -> list:
    """A CALL whose one big argument waits on the bulk path at `endpoint` (a table frame)."""
    table = TABLE_MAGIC + msgpack.packb([endpoint, "t" * 16, b"k" * 16, "aes-256-gcm",
                                         b"s" * 32, 8 << 20, 4 << 20, [[1, 0, 8 << 20]]])
    marker = msgpack.ExtType(1, (1).to_bytes(4, "little"))
    return [msgpack.packb([1, 1, call_id, CONTROL, method, 600_000, 0, [[marker], {}]]),
            b"", table]


def test_a_call_it_may_not_make_is_refused_before_its_big_frames_are_fetched(served):
    """Fetched first, a caller with no token made the node connect to an endpoint it named
    and hold the transfer for its call's own timeout, and only then heard it may not call."""
    _, _, sock = served
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(3.0)
    endpoint = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    try:
        for call_id, method, code in ((1, "guarded", "permission_denied"),
                                      (2, "nope", "method_not_found")):
            sock.send_multipart(_bulk_call(call_id, method, endpoint))
            assert sock.poll(30_000)
            assert msgpack.unpackb(sock.recv(), raw=False)[2:4] == [call_id, code]
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected for them
        # A call it may make is fetched from there (the node connects: this listener would
        # have seen the others).
        sock.send_multipart(_bulk_call(3, "echo", endpoint))
        listener.settimeout(30.0)
        listener.accept()[0].close()
    finally:
        listener.close()


def test_a_segment_is_opened_only_for_a_call_it_may_make_naming_its_key(served, wait_until):
    """A shared-memory table names a process's segment (pid, fd, inode: all guessable); the
    receiver opens it read-write and marks a slot. For a call it refuses, nothing is
    opened; for a table without the segment's key, nothing is marked or read."""
    _, _, sock = served
    fd = os.memfd_create("iris-shm", os.MFD_CLOEXEC)
    key = os.urandom(shm.KEY_BYTES)
    try:
        os.ftruncate(fd, shm._DATA_OFFSET + 4096)
        os.pwrite(fd, (1).to_bytes(8, "little") + key, 0)  # generation 1, its key

        def call(call_id: int, method: str, table_key: bytes) -> list:
            table = shm.MAGIC + msgpack.packb([os.getpid(), fd, os.fstat(fd).st_ino,
                                               shm.BOOT_ID, shm.PID_NS, 1, 0,
                                               [[0, shm._DATA_OFFSET, 16]], table_key])
            marker = msgpack.ExtType(1, (0).to_bytes(4, "little"))
            sock.send_multipart([msgpack.packb([1, 1, call_id, CONTROL, method, 30_000, 0,
                                                [[marker], {}]]), b"", table])
            assert sock.poll(30_000)
            return msgpack.unpackb(sock.recv(), raw=False)

        slot = lambda: os.pread(fd, 8, 64)[0]  # noqa: E731  slot 0's state
        assert call(1, "guarded", key)[2:4] == [1, "permission_denied"]
        assert slot() == 0  # never opened, never marked
        refused = call(2, "echo", os.urandom(shm.KEY_BYTES))  # a guess at everything else
        assert refused[2:4] == [2, "protocol"] and "key" in refused[4], refused
        assert slot() == 0
        assert call(3, "echo", key)[1] == 3  # the sender's own table: mapped and read
        wait_until(lambda: slot() != 0, 30, "slot 0 marked by the receiver")
    finally:
        os.close(fd)


def test_a_control_plane_header_past_its_bound_is_refused_undecoded(served):
    """Decoding builds a header's objects (a 50 MB header of small ints: a 460 MB peak), so
    the control plane refuses one past MAX_CONTROL_HEADER_BYTES before decoding it; the
    controller's own role may send one (a report front's batch)."""
    server, _, sock = served
    big = "x" * (MAX_CONTROL_HEADER_BYTES + 1)
    token = b"t" * 32
    server.grant(token, "controller")
    got = _ask(sock, [1, 1, 1, CONTROL, "echo", 30_000, 0, [[big], {}]])
    assert got[2:4] == [1, "protocol"] and f"at most {MAX_CONTROL_HEADER_BYTES}" in got[4]
    assert len(_ask(sock, [1, 1, 2, CONTROL, "echo", 30_000, 0, [[big], {}], token])[4]) \
        == len(big)
