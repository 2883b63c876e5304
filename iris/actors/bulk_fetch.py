"""Receiving one transfer on the bulk path: S streams pulling chunks into one buffer.

Not the sending side (bulk.py) nor what the bytes are (relay.py, bulk_calls.py). A Fetch
asks a sender's bulk server for the chunks its sink lacks, checks each reply, and opens
(authenticates and decrypts) each chunk on the pool straight into its place in the sink's
buffer: the one copy a receiver makes. Lives on the node's loop thread.

Every reply is checked before any of it is used, and any failure ends the fetch:
- its chunk index must be the oldest one asked for on that stream: a chunk out of order,
  twice (replayed) or never asked for is refused (the streams are FIFO both ways);
- its size must be the chunk's; its tag must open under the transfer's key, position
  and size (bulk_seal.py).
A bad chunk is *fatal* (the sink drops the transfer: nothing of it is delivered); a lost
link (disconnect, refused connection, the sender no longer has the transfer) is not:
a relay sink waits for another sender to attach it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import msgpack
import zmq
from zmq.utils.monitor import parse_monitor_message

from iris.actors import bulk_serve
from iris.actors.bulk_seal import BulkError, ChunkKey

if TYPE_CHECKING:
    from iris.actors.bulk import Bulk, Grant

_NOBLOCK = int(zmq.NOBLOCK)
_MONITORED = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CLOSED
# ZMTP heartbeats on bulk connections: a sender whose host vanished (no FIN, no RST) is
# found within HEARTBEAT_TIMEOUT even while its receiver only waits for chunks. 10 s: a
# loaded 2-core host answers heartbeats from libzmq's I/O thread well within it.
_HEARTBEAT_IVL_MS = 2000
_HEARTBEAT_TIMEOUT_MS = 10_000


class Sink(Protocol):
    """Where a fetch puts a transfer's chunks."""

    key: ChunkKey
    view: memoryview  # key.total bytes; chunk k lands at k * key.chunk

    def arrived(self, k: int, sealed: Any) -> None:
        """Chunk k as it traveled (a zmq.Frame), in order per stream, not yet opened."""

    def opened(self, k: int) -> None:
        """Chunk k is authenticated and in place."""

    def fetch_failed(self, fetch: Fetch, error: BulkError, fatal: bool) -> None:
        """The fetch ended early (it is closed): `fatal` if a chunk was bad."""


class Fetch:
    """Pulls `wanted` chunks (in that order) of the transfer `tid` from `grant`'s sender."""

    def __init__(self, bulk_: Bulk, grant: Grant, tid: str, sink: Sink,
                 wanted: Iterable[int], deadline: float | None = None):
        self._bulk, self._node = bulk_, bulk_.node
        self.endpoint, self.tid, self._sink = grant.endpoint, tid, sink
        self._token = grant.token
        self._wanted = collections.deque(wanted)
        self._asked = 0  # how many of `wanted` were asked for
        self._inflight = 0  # asked for and not yet opened
        cfg = bulk_.config
        self._window = cfg.streams * cfg.credits
        self._streams: list[_Stream] = []
        self.closed = False
        self.received = 0  # bytes
        bulk_.fetches.add(self)
        try:
            for i in range(cfg.streams):
                self._streams.append(_Stream(self, i, grant.endpoint, sink.key))
        except zmq.ZMQError as exc:
            self.close()
            raise BulkError(f"cannot connect to the bulk endpoint {grant.endpoint}: {exc}"
                            ) from None
        self._timer = None if deadline is None else self._node.loop.call_later(
            max(0.0, deadline - self._node.now()), self._expire)
        self._ask()

    def _ask(self) -> None:
        """Ask for more chunks while there is credit (asked for + not yet opened)."""
        streams, window = self._streams, self._window
        touched = set()
        while self._wanted and self._inflight < window:
            k = self._wanted.popleft()
            stream = streams[self._asked % len(streams)]
            self._asked += 1
            self._inflight += 1
            stream.ask(k, msgpack.packb([self.tid, self._token, k]))
            touched.add(stream)
        for stream in touched:
            stream.drain_soon()

    def on_reply(self, stream: _Stream, frames: list) -> None:
        if self.closed:
            return
        try:
            k = self._check(stream, frames)
        except BulkError as exc:
            self._fail(exc, fatal=not isinstance(exc, _Lost))
            return
        sealed = frames[1]
        self.received += len(sealed)
        key, sink = self._sink.key, self._sink
        sink.arrived(k, sealed)
        start = k * key.chunk
        into = sink.view[start:start + key.plain_size(k)]
        fut = self._bulk.pool.submit(key.open_into, k, sealed.buffer, into)
        fut.add_done_callback(lambda f, k=k: self._bulk.to_loop(self._opened, k, f))

    def _check(self, stream: _Stream, frames: list) -> int:
        """The chunk index of a reply that may be used; raises BulkError (or _Lost)."""
        try:
            header = msgpack.unpackb(frames[0].bytes)
            k, status = header[0], header[1]
        except Exception:
            raise BulkError(f"malformed bulk reply from {self.endpoint}") from None
        expected = stream.asked[0] if stream.asked else None
        if type(k) is not int or k != expected:
            raise BulkError(f"chunk {k!r} of transfer {self.tid!r} from {self.endpoint} came "
                            f"out of order, twice, or unasked (stream {stream.index} expected "
                            f"{expected}): refused")
        stream.asked.popleft()
        if status == bulk_serve.GONE:
            raise _Lost(f"the sender at {self.endpoint} no longer has transfer {self.tid!r}")
        if status != bulk_serve.OK:
            why = header[2] if len(header) > 2 else "no reason given"
            raise BulkError(f"the sender at {self.endpoint} refused chunk {k}: {why}")
        size = self._sink.key.sealed_size(k)
        if len(frames) != 2 or len(frames[1]) != size:
            got = len(frames[1]) if len(frames) == 2 else f"{len(frames)} frames"
            raise BulkError(f"chunk {k} of transfer {self.tid!r} from {self.endpoint} has "
                            f"{got} bytes, not {size}: refused")
        return k

    def _opened(self, k: int, fut: Any) -> None:
        """A chunk's open finished: told to the sink even once this fetch is closed (the
        chunk arrived whole before the link was lost: good data, or a bad chunk after all)."""
        error = fut.exception()
        if error is not None:
            error = error if isinstance(error, BulkError) else BulkError(
                f"chunk {k} of transfer {self.tid!r} could not be opened: {error}")
            if self.closed:
                self._sink.fetch_failed(self, error, True)
            else:
                self._fail(error, True)
            return
        self._inflight -= 1
        self._sink.opened(k)
        if self.closed:
            return
        if not self._wanted and not self._inflight:
            self.close()
        else:
            self._ask()

    def lost(self, why: str) -> None:
        if not self.closed:
            self._fail(_Lost(f"bulk link to {self.endpoint} lost: {why}"), fatal=False)

    def _expire(self) -> None:
        if not self.closed:
            self._fail(_Lost(f"transfer {self.tid!r} from {self.endpoint} did not arrive "
                             "before its deadline"), fatal=False)

    def _fail(self, error: BulkError, fatal: bool) -> None:
        self.close()
        self._sink.fetch_failed(self, error, fatal)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._bulk.fetches.discard(self)
        if getattr(self, "_timer", None) is not None:
            self._timer.cancel()
        for stream in self._streams:
            stream.close()


class _Lost(BulkError):
    """The link ended; the data seen so far was good."""


class _Stream:
    """One TCP connection of a fetch: a DEALER, its monitor, the chunks asked on it."""

    def __init__(self, fetch: Fetch, index: int, endpoint: str, key: ChunkKey):
        self.fetch, self.index = fetch, index
        self.asked: collections.deque[int] = collections.deque()
        self._loop = fetch._node.loop
        self._drain_soon = False
        sock = fetch._bulk.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, key.chunk + key.overhead + 1024)
        sock.setsockopt(zmq.HEARTBEAT_IVL, _HEARTBEAT_IVL_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, _HEARTBEAT_TIMEOUT_MS)
        self.sock = sock
        self.monitor = sock.get_monitor_socket(_MONITORED)
        sock.connect(endpoint)
        self._loop.add_reader(sock.getsockopt(zmq.FD), self.drain)
        self._loop.add_reader(self.monitor.getsockopt(zmq.FD), self._on_monitor)
        self._loop.call_soon(self._on_monitor)  # ZMQ_FD is edge-triggered: arm it once

    def ask(self, k: int, request: bytes) -> None:
        self.asked.append(k)
        try:
            self.sock.send(request, _NOBLOCK)
        except zmq.ZMQError as exc:
            self._loop.call_soon(self.fetch.lost, f"cannot send a request: {exc}")

    def drain_soon(self) -> None:
        if not self._drain_soon:
            self._drain_soon = True
            self._loop.call_soon(self.drain)

    def drain(self) -> None:
        self._drain_soon = False
        sock = self.sock
        while not sock.closed and not self.fetch.closed:
            try:
                frame = sock.recv(_NOBLOCK, copy=False)
                frames = [frame]
                while frame.more:
                    frame = sock.recv(_NOBLOCK, copy=False)
                    frames.append(frame)
            except zmq.Again:
                return
            self.fetch.on_reply(self, frames)

    def _on_monitor(self) -> None:
        while not self.monitor.closed:
            try:
                event = parse_monitor_message(self.monitor.recv_multipart(_NOBLOCK))
            except (zmq.Again, zmq.ZMQError):
                return
            kind = zmq.Event(event["event"]).name
            self.fetch.lost(f"stream {self.index}: {kind}")

    def close(self) -> None:
        for sock in (self.sock, self.monitor):
            try:
                self._loop.remove_reader(sock.getsockopt(zmq.FD))
            except (zmq.ZMQError, RuntimeError):
                pass
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(linger=0)
        self.sock.close(linger=0)
