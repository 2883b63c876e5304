"""One payload to many receivers along a chain: sealed once, pulled in chunks, forwarded as is.

Not the weights API (weights.py), the bulk sockets (bulk.py, bulk_fetch.py) nor the crypto
(bulk_seal.py): this module moves one encoded value down a chain of actors that each keep
it and pass it on, and nothing else.

    sender ◄─pull k+2── r1 ◄─pull k+1── r2 ◄─pull k── r3        (chunks: bulk path)
    sender ──attach, finish──► r1 ──attach, finish──► r2 ...     (control: CURVE calls)

- The sender encodes the value once, as a reply would be (a small header and its big
  buffers as frames), makes a fresh key for this transfer, and offers the buffers on its
  bulk server, sealed chunk by chunk as asked (from its own memory: no copy but the
  ciphertext). It attaches the first receiver only, handing it the key over CURVE: about
  one copy's worth of sending and one of sealing, whatever the number of receivers.
- Each receiver pulls the chunks it lacks over `streams` connections, with at most
  credits x streams asked for and not in place (bulk_fetch.py), and opens each one on a
  thread pool straight into the one buffer it allocates for the whole value (its one extra
  copy: the value handed to the user is read-only views of it). It attaches the next
  receiver with the same key and offers it the chunks *as they arrived*: the ciphertext
  goes down the chain unchanged, while the receiver opens its own copy in parallel.
  A chunk it no longer holds as received (sent on, or over RETAIN_CHUNKS held) is sealed
  again from its plaintext: the same bytes, checked against the tag that arrived.
- A receiver refuses a chunk that does not authenticate, comes out of order or twice, or
  has the wrong size: it drops the transfer (nothing is delivered) and its `finish` fails
  with why, so the sender above records it and attaches the next receiver instead.
- A receiver that dies fails that receiver only: its `finish` call fails (peer liveness,
  ~3.5 s), the one above records why and attaches the next one of the chain, which pulls
  what it lacks from its new sender. A receiver whose sender is gone and that no one
  re-attaches for IDLE_S drops its partial copy.
- finish() returns when the receiver holds the value and its own part of the chain is
  over, with {address: why} of every receiver below it not reached.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from iris.actors.bulk import Grant, Layout, SealingOffer
from iris.actors.bulk_fetch import Fetch
from iris.actors.bulk_seal import BulkError, ChunkKey, Tags
from iris.actors.config import BulkConfig
from iris.base.errors import IrisError
from iris.wire import messages

# The pipeline fills in one chunk per hop: a chain of 8 adds ~8 chunks of latency to a
# 1 GiB transfer, not 8 x 1 GiB. The size is BulkConfig.chunk_bytes's, for the same reasons.
CHUNK_BYTES = BulkConfig().chunk_bytes
MAX_CHUNK_BYTES = 64 << 20  # a chunk is one ZeroMQ message on both sides
# attach() answers at once; 60 s only bounds a wedged peer (a dead one fails sooner,
# through peer liveness).
ATTACH_TIMEOUT_S = 60.0
# finish() waits for the receiver's whole part of the chain: 1 GiB at a slow 0.1 GB/s.
FINISH_TIMEOUT_S = 120.0
# A partial payload that received nothing for this long is dropped: its sender (and every
# receiver above) is gone; a live one re-attaches within peer liveness (~3.5 s).
IDLE_S = 60.0
# Bytes of chunks a forwarder keeps as they arrived until its next receiver has them:
# enough for the common case (the next one pulls a chunk or two behind); past it a slow
# next receiver gets chunks sealed again from the plaintext (~0.1 ms/MiB), never a second
# copy of the value.
RETAIN_BYTES = 64 << 20
_KEEP_DONE = 2  # finished transfers remembered for a late re-attach (their value is shared)


class RelayError(IrisError):
    """A transfer this receiver does not hold (dropped, or never attached), or a malformed
    attach."""


def nchunks(meta: dict) -> int:
    return -(-meta["total"] // meta["chunk"]) if meta["total"] else 0


class Source:
    """The sender's side: its value laid out as one stream, offered sealed on its bulk
    server (bulk.SealingOffer: chunk k sealed from the value's own memory when asked)."""

    def __init__(self, node: Any, tid: str, value: Any, chunk: int,
                 extra: dict | None = None) -> None:
        if not 0 < chunk <= MAX_CHUNK_BYTES:
            raise ValueError(f"chunk size must be 1-{MAX_CHUNK_BYTES} bytes, got {chunk}")
        header, *buffers = messages.encode_reply(0, value)
        layout = Layout(buffers, chunk)
        self.meta = {"tid": tid, "header": header, "spans": layout.spans,
                     "total": layout.total, "chunk": chunk, **(extra or {})}
        self.offer = SealingOffer(tid, layout, node.bulk.new_key(tid, layout.total, chunk),
                                  node.bulk)

    @property
    def error(self) -> BaseException | None:
        """Why nothing more may be sent (a chunk changed while being sent), or None."""
        return self.offer.error


class Incoming:
    """A receiver's side of one transfer: the buffer chunks are opened into, what is held,
    and what it offers the next receiver (the chunks as they arrived). Lives on the loop
    thread; it is a bulk_fetch.Sink and a bulk.Offer."""

    def __init__(self, node: Any, meta: dict, key: ChunkKey) -> None:
        self.meta, self.key, self.tid = meta, key, meta["tid"]
        self._node = node
        # The payload's one buffer (bulk_buffers.py): a reused one whose pages are warm, or
        # a fresh mapping faulted in as chunks land; reused once its last view is dropped.
        self.view = node.bulk.buffers.take(meta["total"])
        n = nchunks(meta)
        self._state = bytearray(n)  # per chunk: 0 lacking, 1 arrived (opening), 2 opened
        self._frames: dict[int, Any] = {}  # chunks as they arrived, for the next receiver
        self._served: set[int] = set()  # sent on before they were opened
        self._tags = Tags(key)
        self._lock = threading.Lock()
        self.forwarding = False
        self.have = 0  # chunks 0..have-1 are all opened
        self._opened = 0
        self.fetch: Any = None
        self.lost: BaseException | None = None  # why the last sender's link ended
        self.error: BaseException | None = None
        self.on_progress: Callable[[], None] = _nothing
        self.on_complete: Callable[[], None] = _nothing
        self.last_chunk = self.attached_at = 0.0
        self.relay: asyncio.Future | None = None  # {address: why} below this receiver
        self.received = asyncio.get_running_loop().create_future()

    @property
    def complete(self) -> bool:
        return self._opened == len(self._state)

    def pull(self, grant: Grant) -> None:
        """Pull what is lacking from `grant`'s sender (a new sender replaces the last)."""
        if self.fetch is not None:
            self.fetch.close()
            self.fetch = None
        wanted = [k for k, state in enumerate(self._state) if state == 0]
        if wanted and self.error is None:
            self.lost = None
            self.fetch = Fetch(self._node.bulk, grant, self.tid, self, wanted)

    # ------------------------------------------------------------ bulk_fetch.Sink

    def arrived(self, k: int, sealed: Any) -> None:
        if self._state[k]:
            return
        self._state[k] = 1
        self.last_chunk = self._node.now()
        self._tags.record(k, sealed)
        if self.forwarding and len(self._frames) * self.key.chunk < RETAIN_BYTES:
            self._frames[k] = sealed
            self._node.bulk.wake(self.tid)

    def opened(self, k: int) -> None:
        if self._state[k] == 2 or self.error is not None:
            return
        self._state[k] = 2
        self._opened += 1
        if k in self._served:
            self._served.discard(k)
            self._frames.pop(k, None)
        while self.have < len(self._state) and self._state[self.have] == 2:
            self.have += 1
        if self.forwarding and k not in self._frames:
            self._node.bulk.wake(self.tid)  # the next receiver may wait for it: re-seal
        self.on_progress()
        if self.complete:
            self.on_complete()

    def fetch_failed(self, fetch: Any, error: BulkError, fatal: bool) -> None:
        if fetch is self.fetch:
            self.fetch = None
        if fatal:
            self.drop(error)
        elif fetch is self.fetch or self.fetch is None:
            self.lost = error  # wait for the sender above to attach us again

    # ------------------------------------------------------------ bulk.Offer

    def chunk(self, k: int) -> Any:
        frame = self._frames.get(k)
        if frame is not None:
            return frame
        if self._state[k] == 2:
            return self._node.bulk.pool.submit(self._reseal, k)
        return None

    def _reseal(self, k: int) -> memoryview:
        start = k * self.key.chunk
        sealed = self.key.seal_into(k, self.view[start:start + self.key.plain_size(k)],
                                    self._node.bulk.buffers.take(self.key.sealed_size(k)))
        with self._lock:
            self._tags.check(k, sealed)
        return sealed

    def sent(self, k: int) -> None:
        if self._state[k] == 2:
            self._frames.pop(k, None)
        elif k in self._frames:
            self._served.add(k)

    # ------------------------------------------------------------ the value

    def decode(self) -> Any:
        """The value, as read-only views of the one buffer (no copy)."""
        whole = self.view.toreadonly()
        views = [whole[offset:offset + size] for offset, size in self.meta["spans"]]
        msg = messages.decode(self.meta["header"], views)
        return messages.decode_payload(msg[3], msg[4], views)

    def release(self) -> None:
        """Forget the buffer (the value, views of it, lives on with whoever holds it)."""
        if self.received.done():
            self._frames.clear()
            self.view = memoryview(b"")

    def drop(self, why: BaseException) -> None:
        if self.error is not None:
            return
        self.error = why
        if self.fetch is not None:
            self.fetch.close()
            self.fetch = None
        self._node.bulk.withdraw(self.tid, self)  # the next receiver's requests: GONE
        if self.relay is not None and not self.received.done():
            self.relay.cancel()  # the sender above attaches the receivers below instead
        if not self.received.done():
            self.received.set_exception(why)
            self.received.exception()  # retrieved: nobody may be waiting
        self._frames.clear()
        self.view = memoryview(b"")
        self.on_progress()


def _nothing() -> None:
    pass


async def relay(node: Any, source: Source | Incoming, chain: list) -> dict:
    """Offer `source` and attach `chain` ([[address, actor key], ...]) one after the other
    until one takes it on; {address: why} of every receiver not reached."""
    failures: dict = {}
    if not chain:
        return failures
    offer = source.offer if isinstance(source, Source) else source
    grant = node.bulk.offer(offer).to_wire()
    tid = source.meta["tid"]
    try:
        while chain:
            (address, key), rest = chain[0], chain[1:]
            try:
                await node.call(address, key, "attach", (source.meta, rest, node.address, grant),
                                timeout_s=ATTACH_TIMEOUT_S)
                below = await node.call(address, key, "finish", (tid,),
                                        timeout_s=FINISH_TIMEOUT_S)
                failures.update(below or {})
                return failures
            except Exception as exc:  # this link failed: that receiver only; attach the next
                if source.error is not None:  # our own copy is gone: nothing left to pass on
                    failures.update({a: f"not forwarded: {source.error}" for a, _ in chain})
                    return failures
                failures[address] = f"{type(exc).__name__}: {exc}"
                chain = rest
        return failures
    finally:
        node.bulk.withdraw(tid, offer)


class Transfers:
    """A receiver's transfers by id; `on_value(meta, value, via)` when one is complete."""

    def __init__(self, node: Any, on_value: Callable[[dict, Any, str], None]) -> None:
        self._node = node
        self._on_value = on_value
        self._live: dict[str, Incoming] = {}
        self._done: dict[str, Incoming] = {}
        self._via: dict[str, str] = {}
        # The last transfers completed here, for benchmarks and operators: tid, bytes, via,
        # seconds from the first attach to the whole value in place.
        self.history: collections.deque[dict] = collections.deque(maxlen=16)

    def attach(self, meta: Any, chain: Any, via: Any, grant: Any) -> int:
        """Start (or resume, from a new sender) receiving `meta`'s transfer; the chunks
        opened so far. Everything is checked before anything changes."""
        meta, chain, via, grant = _checked(meta, chain, via, grant)
        tid = meta["tid"]
        key = self._node.bulk.accept_key(grant, tid, meta["total"], meta["chunk"])
        if tid in self._done:
            return nchunks(meta)
        incoming = self._live.get(tid)
        if incoming is not None and incoming.error is not None:
            incoming = None  # dropped (a bad chunk from its last sender): start afresh
        if incoming is not None and not incoming.key.same_secret(key):
            raise RelayError(f"transfer {tid!r} attached again with a different key: refused")
        self._via[tid] = via
        if incoming is None:
            incoming = self._live[tid] = Incoming(self._node, meta, key)
            incoming.last_chunk = incoming.attached_at = self._node.now()
            incoming.on_complete = lambda: self._complete(tid, incoming)
            incoming.forwarding = bool(chain)
            incoming.relay = asyncio.ensure_future(relay(self._node, incoming, chain))
            # Passed on: the buffer is the user's value now, not ours to keep alive.
            incoming.relay.add_done_callback(lambda _: incoming.release())
            self._node.loop.call_later(IDLE_S, self._check_idle, tid)
            if incoming.complete:  # an empty payload
                self._complete(tid, incoming)
                return 0
        incoming.pull(grant)
        return incoming.have

    async def finish(self, tid: str) -> dict:
        incoming = self._live.get(tid) or self._done.get(tid)
        if incoming is None:
            raise RelayError(f"no transfer {tid!r} here")
        await incoming.received
        return await asyncio.shield(incoming.relay) if incoming.relay else {}

    def _complete(self, tid: str, incoming: Incoming) -> None:
        if self._live.get(tid) is not incoming:
            return
        self._live.pop(tid, None)
        self._done[tid] = incoming
        while len(self._done) > _KEEP_DONE:
            self._done.pop(next(iter(self._done)))
        try:
            value = incoming.decode()
        except Exception as exc:
            incoming.drop(exc)
            return
        incoming.received.set_result(None)
        via = self._via.pop(tid, "")
        self.history.append({"tid": tid, "bytes": incoming.meta["total"], "via": via,
                             "seconds": self._node.now() - incoming.attached_at})
        self._on_value(incoming.meta, value, via)
        if incoming.relay is not None and incoming.relay.done():
            incoming.release()

    def _check_idle(self, tid: str) -> None:
        incoming = self._live.get(tid)
        if incoming is None:
            return
        if incoming.error is not None:  # dropped (a bad chunk): forget it
            self._forget(tid)
            return
        idle = self._node.now() - incoming.last_chunk
        if idle < IDLE_S:
            self._node.loop.call_later(IDLE_S - idle, self._check_idle, tid)
            return
        self._forget(tid)
        incoming.drop(RelayError(f"transfer {tid!r}: nothing received for {IDLE_S:.0f} s "
                                 "(its sender is gone)"))

    def _forget(self, tid: str) -> None:
        self._live.pop(tid, None)
        self._via.pop(tid, None)

    def close(self) -> None:
        for incoming in self._live.values():
            incoming.drop(RelayError("the receiver closed"))
            if incoming.relay is not None:
                incoming.relay.cancel()
                with contextlib.suppress(BaseException):
                    incoming.relay.exception()
        self._live.clear()


def _checked(meta: Any, chain: Any, via: Any, grant: Any) -> tuple[dict, list, str, Grant]:
    """attach()'s arguments, each checked (RelayError naming the first wrong one)."""
    if type(meta) is not dict:
        raise RelayError(f"meta: expected a map, got {type(meta).__name__}")
    for field, kind in (("tid", str), ("header", bytes), ("spans", list), ("total", int),
                        ("chunk", int)):
        if type(meta.get(field)) is not kind:
            raise RelayError(f"meta.{field}: expected {kind.__name__}, got "
                             f"{type(meta.get(field)).__name__}")
    if not 0 < meta["chunk"] <= MAX_CHUNK_BYTES or meta["total"] < 0:
        raise RelayError(f"meta: chunk must be 1-{MAX_CHUNK_BYTES} bytes and total >= 0")
    for span in meta["spans"]:
        if (type(span) is not list or len(span) != 2 or any(type(x) is not int for x in span)
                or span[0] < 0 or span[1] < 0 or span[0] + span[1] > meta["total"]):
            raise RelayError(f"meta.spans: {span!r} is not an [offset, size] inside the "
                             "payload")
    if type(chain) is not list or any(
            type(link) is not list or len(link) != 2 or any(type(x) is not str for x in link)
            for link in chain):
        raise RelayError("chain: expected a list of [address, actor key]")
    if type(via) is not str:
        raise RelayError(f"via: expected str, got {type(via).__name__}")
    try:
        return meta, chain, via, Grant.from_wire(grant)
    except BulkError as exc:
        raise RelayError(f"grant: {exc}") from None
