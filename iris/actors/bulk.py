"""The bulk path: big payloads to other hosts on connections of their own, sealed per chunk.

Not what is sent (relay.py: weights down a chain; bulk_calls.py: a call's big frames), not
the crypto (bulk_seal.py), the server socket (bulk_serve.py) or the receiving side of a
link (bulk_fetch.py). This module is what a node keeps for the bulk path (its server,
thread pool, context, buffers) and what is offered (Offer, Layout, SealingOffer).

    receiver (bulk_fetch.Fetch)                     sender (bulk_serve.Server, an Offer each)
      S DEALERs, plain TCP ── [tid, token, k] ──►  bulk ROUTER
                          ◄── [k, 0] + chunk k ──  Offer.chunk(k): sealed once, or as received

- **Pull.** The receiver asks for every chunk it lacks, in order, chunk i of them on stream
  i mod S, with at most `credits` x S asked for and not yet in place: the credit-based flow
  control of the ZeroMQ guide, over all the link's streams. The server answers each
  connection's requests in the order asked; a chunk not here yet (a forwarder still
  receiving it) holds its request until it is.
- **Why not CURVE.** libzmq's CURVE boxes each message on one I/O thread: 0.15-0.27 GB/s per
  link here, against 0.5-1.1 GB/s for plain TCP. These sockets carry only chunks sealed
  with a key that was handed over CURVE (bulk_seal.py), or plaintext by explicit choice.
- **Unauthenticated sockets.** Anyone who reaches the port may connect, so: requests are
  one small frame (MAXMSGSIZE), a request is served only with its offer's token (16 random
  bytes, handed over CURVE with the key), anything else is dropped and counted; a receiver
  checks every chunk's size, order and tag (bulk_fetch.py) before any of it is used.
- Everything here runs on the node's loop thread, except sealing and opening, which run on
  a small thread pool (cryptography releases the GIL: chunks in parallel on every core).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import zmq

from iris.actors.bulk_buffers import Buffers
from iris.actors.bulk_seal import PLAIN, BulkError, ChunkKey, Tags, default_algorithm
from iris.actors.bulk_serve import TOKEN_BYTES, Server
from iris.actors.config import BulkConfig
from iris.base.errors import ConfigError, PeerUnavailableError

if TYPE_CHECKING:
    from iris.actors.node import Node

_log = logging.getLogger(__name__)


def effective_config(config: BulkConfig) -> BulkConfig:
    """`config`, with $IRIS_BULK_PLAINTEXT=1, $IRIS_BULK_STREAMS=N and
    $IRIS_BULK_MIN_CALL_BYTES=B (0: big call frames stay on CURVE) applied."""
    plain = os.environ.get("IRIS_BULK_PLAINTEXT", "").strip()
    streams = os.environ.get("IRIS_BULK_STREAMS", "").strip()
    min_call = os.environ.get("IRIS_BULK_MIN_CALL_BYTES", "").strip()
    if plain not in ("", "0", "1"):
        raise ConfigError(f"IRIS_BULK_PLAINTEXT={plain!r}: expected 1 (plaintext) or 0")
    if streams and (not streams.isdigit() or not 1 <= int(streams) <= 64):
        raise ConfigError(f"IRIS_BULK_STREAMS={streams!r}: expected a number of streams 1-64")
    if min_call and not min_call.isdigit():
        raise ConfigError(f"IRIS_BULK_MIN_CALL_BYTES={min_call!r}: expected a number of "
                          "bytes (0: off)")
    config = replace(config, plaintext=config.plaintext or plain == "1",
                     streams=int(streams) if streams else config.streams,
                     min_call_bytes=int(min_call) if min_call else config.min_call_bytes)
    if not 1 <= config.streams <= 64 or config.credits < 1 or config.chunk_bytes < 1:
        raise ConfigError(f"bulk config: streams must be 1-64 and credits, chunk_bytes >= 1, "
                          f"got {config}")
    return config


class Offer(Protocol):
    """What a server gives out for one transfer."""

    tid: str
    key: ChunkKey

    def chunk(self, k: int) -> Any:
        """Chunk k as it travels (bytes, a view, a zmq.Frame), a concurrent Future of it
        (being sealed), or None when it is not here yet (the offer calls Bulk.wake(tid)
        once it is). Raises BulkError if it must not be sent."""

    def sent(self, k: int) -> None:
        """Chunk k was handed to the socket."""


@dataclass(frozen=True)
class Grant:
    """What a receiver needs to pull a transfer: handed to it over CURVE, never logged."""

    endpoint: str
    token: bytes
    algorithm: str
    secret: bytes

    def __repr__(self) -> str:
        return f"Grant({self.endpoint}, {self.algorithm})"

    def to_wire(self) -> list:
        return [self.endpoint, self.token, self.algorithm, self.secret]

    @classmethod
    def from_wire(cls, raw: Any) -> Grant:
        if (type(raw) is not list or len(raw) != 4 or type(raw[0]) is not str
                or not raw[0].startswith("tcp://") or type(raw[1]) is not bytes
                or len(raw[1]) != TOKEN_BYTES or type(raw[2]) is not str
                or type(raw[3]) is not bytes):
            raise BulkError("malformed bulk grant: expected [tcp endpoint, 16-byte token, "
                            "algorithm, key]")
        return cls(*raw)


class Layout:
    """Buffers laid end to end as one stream (each 64-byte aligned, so views of the
    received stream are aligned numpy arrays), cut into chunks of `chunk` bytes."""

    ALIGN = 64

    def __init__(self, buffers: list, chunk: int):
        self.views = [_bytes_view(b) for b in buffers]
        self.spans: list[list[int]] = []
        total = 0
        for view in self.views:
            total = -(-total // self.ALIGN) * self.ALIGN
            self.spans.append([total, view.nbytes])
            total += view.nbytes
        self.total, self.chunk = total, chunk

    def plain_chunk(self, k: int) -> Any:
        """Chunk k's bytes: a view of one buffer, or (straddling buffers) a gathered copy
        with zeros in the alignment gaps."""
        start = k * self.chunk
        end = min(start + self.chunk, self.total)
        pieces = []
        for (offset, size), view in zip(self.spans, self.views, strict=True):
            lo, hi = max(start, offset), min(end, offset + size)
            if lo < hi:
                pieces.append((lo - start, view[lo - offset:hi - offset]))
        if len(pieces) == 1 and pieces[0][0] == 0 and pieces[0][1].nbytes == end - start:
            return pieces[0][1]
        out = bytearray(end - start)
        for at, piece in pieces:
            out[at:at + piece.nbytes] = piece
        return out


def _bytes_view(buf: Any) -> memoryview:
    view = buf.raw() if hasattr(buf, "raw") else memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class SealingOffer:
    """An offer over a sender's own buffers: chunk k sealed on the pool when asked for
    (once per receiver pulling it: once in all, down a chain), its tag checked. Sealed
    chunks go into reused buffers (Buffers: warm pages), free again once sent.

    Sealing runs up to a window ahead of the requests (credits x streams chunks): a request
    then finds its chunk sealed, instead of waiting for two more thread hand-offs (which a
    loaded machine makes slow: the sealed calls ran at 43 % of plaintext without it)."""

    def __init__(self, tid: str, layout: Layout, key: ChunkKey, bulk: Bulk):
        self.tid, self.layout, self.key = tid, layout, key
        self._pool, self._buffers = bulk.pool, bulk.buffers
        self._tags = Tags(key)
        self._lock = threading.Lock()
        self._depth = bulk.config.streams * bulk.config.credits
        self._ahead: dict[int, Future] = {}  # sealed (or being sealed) before asked for
        self._next = 0  # chunks below it were sealed or handed out once already
        self.on_sent: Callable[[int], None] | None = None
        self.error: BulkError | None = None  # set once a chunk must not be sent

    def chunk(self, k: int) -> Any:
        if self.key.overhead == 0:
            return self.layout.plain_chunk(k)
        fut = self._ahead.pop(k, None) or self._pool.submit(self._seal, k)
        self._next = max(self._next, k + 1)
        while self._next < min(k + 1 + self._depth, self.key.nchunks):
            self._ahead[self._next] = self._pool.submit(self._seal, self._next)
            self._next += 1
        return fut

    def _seal(self, k: int) -> memoryview:
        sealed = self.key.seal_into(k, self.layout.plain_chunk(k),
                                    self._buffers.take(self.key.sealed_size(k)))
        with self._lock:  # two receivers may ask for chunk k at once (route-around)
            try:
                self._tags.check(k, sealed)
            except BulkError as exc:
                self.error = exc
                raise
        return sealed

    def sent(self, k: int) -> None:
        if self.on_sent is not None:
            self.on_sent(k)


class Bulk:
    """One node's bulk path: its server, pool and context, made at first use."""

    def __init__(self, node: Node, config: BulkConfig):
        self.node = node
        self.config = effective_config(config)
        self.algorithm = default_algorithm(self.config.plaintext)
        self._ctx: zmq.Context | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._server: Server | None = None
        self._start_lock = threading.Lock()
        self.fetches: set = set()  # live bulk_fetch.Fetch objects (closed at stop)
        # Work the pool finished, for the loop thread: one wake-up for a burst of them.
        self._done: collections.deque = collections.deque()
        self._done_lock = threading.Lock()
        self._done_wake = False
        self.buffers = Buffers(self.config.pool_bytes)  # where receivers open chunks into
        self.dropped_requests = 0  # malformed, unknown transfer or wrong token
        if self.config.plaintext:
            _log.warning("node %s: bulk transfers to other hosts are NOT encrypted "
                         "(IRIS_BULK_PLAINTEXT / NodeConfig.bulk.plaintext): only for a "
                         "network you trust", node.id)

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._start_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.config.crypto_threads,
                                                    thread_name_prefix=f"iris-{self.node.id}-bulk")
        return self._pool

    @property
    def context(self) -> zmq.Context:
        if self._ctx is None:
            with self._start_lock:
                if self._ctx is None:
                    ctx = zmq.Context(io_threads=self.config.io_threads)
                    ctx.set(zmq.MAX_SOCKETS, self.node.config.max_sockets)
                    self._ctx = ctx
        return self._ctx

    def to_loop(self, fn: Callable, *args: Any) -> None:
        """From a pool thread: run fn(*args) on the loop thread. Chunks finish in bursts;
        they share one wake-up of the loop (each costs a context switch otherwise)."""
        self._done.append((fn, args))
        with self._done_lock:
            if self._done_wake:
                return
            self._done_wake = True
        try:
            self.node.loop.call_soon_threadsafe(self._run_done)
        except RuntimeError:  # the loop closed: the node stopped
            pass

    def _run_done(self) -> None:
        with self._done_lock:
            self._done_wake = False
        done = self._done
        while done:
            fn, args = done.popleft()
            try:
                fn(*args)
            except Exception:
                _log.exception("node %s: bulk completion %s failed", self.node.id,
                               getattr(fn, "__qualname__", "?"))

    def new_key(self, tid: str, total: int, chunk: int) -> ChunkKey:
        return ChunkKey.new(self.algorithm, tid, total, chunk)

    def accept_key(self, grant: Grant, tid: str, total: int, chunk: int) -> ChunkKey:
        """The key of a transfer granted to this node; refuses plaintext unless allowed."""
        if grant.algorithm == PLAIN and not self.config.plaintext:
            raise BulkError(f"transfer {tid!r} is sent in plaintext and this node does not "
                            "allow it (IRIS_BULK_PLAINTEXT=1 / NodeConfig.bulk.plaintext)")
        return ChunkKey(grant.algorithm, grant.secret, tid, total, chunk)

    # ------------------------------------------------------------ serving (loop thread)

    def offer(self, offer: Offer, token: bytes | None = None) -> Grant:
        """Serve `offer` (with `token`, or a new one) until withdraw(tid); the grant a
        receiver pulls it with."""
        server = self._started()
        token = server.add(offer, token)
        return Grant(server.endpoint, token, offer.key.algorithm, offer.key.secret())

    def withdraw(self, tid: str, offer: Offer | None = None) -> None:
        """Stop serving `tid` (only if it is still `offer`, when given)."""
        if self._server is not None:
            self._server.remove(tid, offer)

    def wake(self, tid: str) -> None:
        """More chunks of `tid` are here: answer requests waiting for them."""
        if self._server is not None:
            self._server.wake(tid)

    def endpoint(self) -> str:
        """This node's bulk endpoint, bound now if need be (from any thread)."""
        if self._server is not None:
            return self._server.endpoint
        if self.node._stopped:
            raise PeerUnavailableError("this node is stopped: no bulk endpoint")
        if self.node.in_loop_thread():
            return self._started().endpoint
        done, box = threading.Event(), []

        def start() -> None:
            try:
                box.append(self._started().endpoint)
            except BaseException as exc:
                box.append(exc)
            done.set()

        self.node.call_in_loop(start)
        if not done.wait(30) or not box:
            raise PeerUnavailableError("this node is stopping: no bulk endpoint")
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _started(self) -> Server:
        if self._server is None:
            self._server = Server(self)
        return self._server

    def close(self) -> None:
        """On the loop thread, at node stop: fetches, server, pool, context."""
        for fetch in list(self.fetches):
            fetch.close()
        if self._server is not None:
            self._server.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
        self.buffers.close()
