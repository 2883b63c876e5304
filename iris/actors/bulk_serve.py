"""The bulk path's server: the ROUTER that answers chunk requests, on the node's loop.

Not the offers (bulk.py: what is served) nor the receiving side (bulk_fetch.py). Requests
are `[tid, token, k]` (one small frame, MAXMSGSIZE); a malformed one is dropped and counted,
one whose (tid, token) is not offered here is answered GONE in its turn (so a receiver
stops waiting; the answer is the same for every wrong token). Each connection's requests are answered
in the order asked: a chunk not here yet holds the ones behind it.
"""

from __future__ import annotations

import collections
import secrets
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import msgpack
import zmq

from iris.actors.bulk_seal import BulkError

if TYPE_CHECKING:
    from iris.actors.bulk import Bulk, Offer

_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
TOKEN_BYTES = 16
REQUEST_MAX_BYTES = 1024  # [tid, token, k]: a transfer id is at most a few hundred bytes
# Requests one connection may have waiting: a receiver asks for at most credits x streams;
# this only bounds a peer that asks without reading.
_QUEUE_MAX = 4096
# A connection whose send queue is full is tried again this much later (only a receiver
# that asks for more than its credits can fill it).
_RETRY_S = 0.01
# Reply statuses: the chunk follows; the sender has no such transfer (any more); the
# sender refused to send it (its bytes changed: bulk_seal.Tags).
OK, GONE, REFUSED = 0, 1, 2
_GONE = object()  # a request for a transfer not offered here


def _bind_host(address: str) -> str:
    """The node's own host as a tcp endpoint prefix (loopback for ipc/inproc nodes)."""
    if address.startswith("tcp://"):
        return address.rsplit(":", 1)[0]
    return "tcp://127.0.0.1"


class Server:
    """The bulk ROUTER: answers [tid, token, k] with chunk k of that offer, per connection
    in the order asked."""

    def __init__(self, bulk: Bulk):
        self._bulk = bulk
        node = bulk.node
        self._loop = node.loop
        sock = bulk.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, REQUEST_MAX_BYTES)
        sock.setsockopt(zmq.SNDHWM, _QUEUE_MAX)
        port = sock.bind_to_random_port(_bind_host(node.address))
        self.endpoint = f"{_bind_host(node.address)}:{port}"
        self._sock = sock
        # (tid, token) -> offer: two offers of one transfer (two receivers of it in one
        # process) are told apart by their tokens
        self._offers: dict[tuple[str, bytes], Offer] = {}
        # routing id -> that connection's requests, in order: [(tid, token), k, item]
        self._queues: dict[bytes, collections.deque] = {}
        self._drain_soon = False
        self._loop.add_reader(sock.getsockopt(zmq.FD), self._drain)

    def add(self, offer: Offer, token: bytes | None = None) -> bytes:
        for (_, known), held in self._offers.items():
            if held is offer:
                return known
        token = token or secrets.token_bytes(TOKEN_BYTES)
        self._offers[(offer.tid, token)] = offer
        return token

    def remove(self, tid: str, offer: Offer | None = None) -> None:
        gone = [key for key, held in self._offers.items()
                if key[0] == tid and (offer is None or held is offer)]
        for key in gone:
            del self._offers[key]
        if gone:
            self.wake(tid)  # its waiting requests are answered GONE

    def wake(self, tid: str) -> None:
        for rid, queue in list(self._queues.items()):
            if queue and queue[0][0][0] == tid:
                self._pump(rid)

    def _drain(self) -> None:
        self._drain_soon = False
        sock = self._sock
        while not sock.closed:
            try:
                rid = sock.recv(_NOBLOCK)
                if not sock.getsockopt(zmq.RCVMORE):
                    continue
                raw = sock.recv(_NOBLOCK)
                while sock.getsockopt(zmq.RCVMORE):  # extra frames: not ours
                    sock.recv(_NOBLOCK)
                    raw = None
            except zmq.Again:
                return
            self._on_request(rid, raw)

    def _on_request(self, rid: bytes, raw: bytes | None) -> None:
        try:
            tid, token, k = msgpack.unpackb(raw) if raw else (None, None, None)
        except Exception:
            tid = token = k = None
        queue = self._queues.get(rid)
        if (type(tid) is not str or type(token) is not bytes or type(k) is not int or k < 0
                or (queue is not None and len(queue) >= _QUEUE_MAX)):
            self._bulk.dropped_requests += 1
            return
        key = (tid, token)
        offer = self._offers.get(key)
        if offer is None:  # unknown, or over: GONE (in its turn), so its receiver stops
            self._bulk.dropped_requests += 1
            item: Any = _GONE
        elif k >= offer.key.nchunks:
            self._bulk.dropped_requests += 1
            return
        else:
            try:
                item = offer.chunk(k)  # sealing starts now: the pool works ahead of the socket
            except BulkError as exc:
                item = exc
        if queue is None:
            queue = self._queues[rid] = collections.deque()
        queue.append([key, k, item])
        self._pump(rid)

    def _pump(self, rid: bytes) -> None:
        """Send this connection's chunks that are ready, in the order asked."""
        queue = self._queues.get(rid)
        while queue:
            entry = queue[0]
            key, k, item = entry[0], entry[1], entry[2]
            offer = self._offers.get(key)
            if offer is None or item is _GONE:
                status, payload = [k, GONE, f"no transfer {key[0]!r} here (over, or never)"], None
            else:
                if item is None:
                    item = entry[2] = offer.chunk(k)
                    if item is None:
                        return  # not here yet: Bulk.wake
                if isinstance(item, Future):
                    if not item.done():
                        if len(entry) == 3:  # one wake-up per chunk being sealed
                            entry.append(True)
                            item.add_done_callback(lambda _, rid=rid: self._wake_rid(rid))
                        return
                    error = item.exception()
                    item = error if error is not None else item.result()
                if isinstance(item, BaseException):
                    status, payload = [k, REFUSED, str(item)], None
                else:
                    status, payload = [k, OK], item
            if not self._send(rid, status, payload):
                if rid in self._queues:  # full: its receiver reads slower than asked
                    self._loop.call_later(_RETRY_S, self._pump, rid)
                return
            queue.popleft()
            if payload is not None:
                offer.sent(k)
        self._queues.pop(rid, None)

    def _wake_rid(self, rid: bytes) -> None:  # from a pool thread
        self._bulk.to_loop(self._pump, rid)

    def _send(self, rid: bytes, status: list, payload: Any) -> bool:
        """False if the connection is full (try again at its next request or wake)."""
        try:
            self._sock.send(rid, _NOBLOCK | _SNDMORE)
            header = msgpack.packb(status)
            if payload is None:
                self._sock.send(header, _NOBLOCK)
            else:
                self._sock.send(header, _NOBLOCK | _SNDMORE)
                self._sock.send(payload, _NOBLOCK, copy=False)
        except zmq.Again:
            return False
        except zmq.ZMQError:  # the connection is gone: so are its requests
            self._queues.pop(rid, None)
            return False
        finally:
            if not self._drain_soon:  # ZMQ_FD is edge-triggered: read again after a send
                self._drain_soon = True
                self._loop.call_soon(self._drain)
        return True

    def close(self) -> None:
        try:
            self._loop.remove_reader(self._sock.getsockopt(zmq.FD))
        except (zmq.ZMQError, RuntimeError):
            pass
        self._sock.close(linger=0)
        self._offers.clear()
        self._queues.clear()
