"""One payload to many receivers along a chain: chunked, pipelined, credit-based flow control.

Not the weights API (weights.py) nor the sockets (node.py): this module moves one encoded
value down a chain of actors that each keep it and pass it on, and nothing else.

    sender ──chunk k+2──► r1 ──chunk k+1──► r2 ──chunk k──► r3

- The sender encodes the value once, as a reply would be (a small header and its big buffers
  as frames), and streams the buffers in chunks of `chunk` bytes from its own memory (no
  copy) to the first receiver only: about one copy's worth of sending, whatever the number
  of receivers. Each receiver copies every chunk into one buffer it allocates for the whole
  payload (its one extra copy: the value handed to the user is read-only views of it) and
  forwards chunk k from that buffer to the next receiver while it receives chunk k+1.
- Credit-based flow control on every link (the ZeroMQ guide's "credit-based flow control"):
  at most CREDITS chunks sent and not yet acknowledged; a chunk's reply is its credit back.
  Memory in flight is bounded by CREDITS chunks per link, and a slow receiver slows only the
  links into it: the one above it keeps receiving into its own buffer.
- A receiver that dies fails that receiver only: the link into it fails (its chunk or finish
  call: peer liveness, ~3.5 s), the receiver above records why and attaches the next one of
  the chain instead, which answers how many chunks it already holds, so the stream resumes
  there. A receiver whose chunks stop for IDLE_S (its sender died) drops its partial copy.
- finish() returns when the receiver holds the value and its own part of the chain is over,
  with {address: why} of every receiver below it not reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import pickle
from collections.abc import Callable
from typing import Any

from iris.base.errors import IrisError
from iris.wire import messages

# 1 MiB chunks, 8 in flight: 8 MiB per link keeps a loopback or LAN TCP link busy (the
# socket path measured the same from 1 to 8 MiB chunks here) while the pipeline fills in one
# chunk per hop: a chain of 8 adds ~8 MiB of latency to a 1 GiB transfer, not 8 x 1 GiB.
CHUNK_BYTES = 1 << 20
CREDITS = 8
# A chunk is acknowledged once copied (~1 ms): 60 s only bounds a wedged or silent peer
# (a dead one fails sooner, through peer liveness).
CHUNK_TIMEOUT_S = 60.0
# finish() waits for the receiver's whole part of the chain: 1 GiB at a slow 0.1 GB/s.
FINISH_TIMEOUT_S = 120.0
# A partial payload with no chunk for this long is dropped: its sender (and every receiver
# above) is gone; a live one re-attaches within peer liveness (~3.5 s), with room to spare.
IDLE_S = 60.0
_ALIGN = 64  # each buffer starts 64-byte aligned in the stream: numpy views stay aligned
_KEEP_DONE = 2  # finished transfers remembered for a late re-attach (their value is shared)


class RelayError(IrisError):
    """A transfer this receiver does not hold (dropped after IDLE_S, or never attached)."""


def nchunks(meta: dict) -> int:
    return -(-meta["total"] // meta["chunk"]) if meta["total"] else 0


def _bytes_view(buf: Any) -> memoryview:
    if isinstance(buf, pickle.PickleBuffer):
        return buf.raw()
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class Source:
    """The sender's side: chunk k sliced out of the value's own buffers (no copy)."""

    def __init__(self, tid: str, value: Any, chunk: int, extra: dict | None = None) -> None:
        if chunk <= 0:
            raise ValueError(f"chunk size must be > 0 bytes, got {chunk}")
        header, *buffers = messages.encode_reply(0, value)
        self.views = [_bytes_view(b) for b in buffers]
        spans, total = [], 0
        for view in self.views:
            total = -(-total // _ALIGN) * _ALIGN
            spans.append([total, view.nbytes])
            total += view.nbytes
        self.meta = {"tid": tid, "header": header, "spans": spans, "total": total,
                     "chunk": chunk, **(extra or {})}
        self.have = nchunks(self.meta)
        self.error: BaseException | None = None
        self.on_progress: Callable[[], None] = _nothing

    def pieces(self, k: int) -> list:
        """[[stream offset, bytes], ...] of chunk k: one piece per buffer it overlaps."""
        start = k * self.meta["chunk"]
        end = min(start + self.meta["chunk"], self.meta["total"])
        out = []
        for (offset, size), view in zip(self.meta["spans"], self.views, strict=True):
            lo, hi = max(start, offset), min(end, offset + size)
            if lo < hi:
                out.append([lo, view[lo - offset:hi - offset]])
        return out


def _nothing() -> None:
    pass


class Incoming:
    """A receiver's side of one transfer: the buffer being filled, what is held so far, and
    the relay passing it on. Lives on the node's loop thread."""

    def __init__(self, meta: dict) -> None:
        self.meta = meta
        # The payload's one buffer: an anonymous mapping, faulted in as chunks land (no
        # zeroing pass over it), unmapped once the last view of it is dropped.
        self._buf: Any = mmap.mmap(-1, meta["total"]) if meta["total"] else bytearray()
        self._view = memoryview(self._buf)
        self._got: set[int] = set()
        self.have = 0  # chunks 0..have-1 are all here
        self.error: BaseException | None = None
        self.on_progress: Callable[[], None] = _nothing
        self.last_chunk = 0.0
        self.relay: asyncio.Future | None = None  # {address: why} below this receiver
        self.received = asyncio.get_running_loop().create_future()

    def put(self, k: int, pieces: list, now: float) -> bool:
        """Copy chunk k in; True when it completed the payload."""
        if not 0 <= k < nchunks(self.meta):
            raise RelayError(f"chunk {k} of a {nchunks(self.meta)}-chunk transfer")
        self.last_chunk = now
        if k in self._got or self.received.done():
            return False
        start, end = k * self.meta["chunk"], min((k + 1) * self.meta["chunk"],
                                                 self.meta["total"])
        for offset, data in pieces:
            view = data if isinstance(data, memoryview) else memoryview(data)
            if not start <= offset <= offset + view.nbytes <= end:
                raise RelayError(f"chunk {k}: piece at {offset} of {view.nbytes} bytes is "
                                 f"outside {start}-{end}")
            self._view[offset:offset + view.nbytes] = view.cast("B") if view.ndim != 1 \
                or view.format != "B" else view
        self._got.add(k)
        while self.have in self._got:
            self._got.discard(self.have)
            self.have += 1
        self.on_progress()
        return self.have == nchunks(self.meta)

    def pieces(self, k: int) -> list:
        start = k * self.meta["chunk"]
        return [[start, self._view[start:min(start + self.meta["chunk"], self.meta["total"])]]]

    def decode(self) -> Any:
        """The value, as read-only views of the one buffer (no copy)."""
        whole = self._view.toreadonly()
        views = [whole[offset:offset + size] for offset, size in self.meta["spans"]]
        msg = messages.decode(self.meta["header"], views)
        return messages.decode_payload(msg[3], msg[4], views)

    def release(self) -> None:
        """Forget the buffer (the value, views of it, lives on with whoever holds it)."""
        if self.received.done():
            self._view = memoryview(b"")
            self._buf = None

    def drop(self, why: BaseException) -> None:
        self.error = why
        if not self.received.done():
            self.received.set_exception(why)
            self.received.exception()  # retrieved: nobody may be waiting
        self._view = memoryview(b"")
        self._buf = None
        self.on_progress()


async def relay(node: Any, source: Source | Incoming, chain: list) -> dict:
    """Stream `source` down `chain` ([[address, actor key], ...]); {address: why} of every
    receiver not reached. A failed link skips its receiver and attaches the next."""
    failures: dict = {}
    while chain:
        (address, key), rest = chain[0], chain[1:]
        try:
            await _feed(node, source, address, key, rest)
            below = await node.call(address, key, "finish", (source.meta["tid"],),
                                    timeout_s=FINISH_TIMEOUT_S)
            failures.update(below or {})
            return failures
        except Exception as exc:  # this link failed: that receiver only; re-attach below it
            if source.error is not None:  # our own copy is gone: nothing left to pass on
                failures.update({a: f"not forwarded: {source.error}" for a, _ in chain})
                return failures
            failures[address] = f"{type(exc).__name__}: {exc}"
            chain = rest
    return failures


async def _feed(node: Any, source: Source | Incoming, address: str, key: str,
                rest: list) -> None:
    """Attach `address` (it answers the chunks it holds) and send it the rest, with at most
    CREDITS chunks unacknowledged; raises why the link failed."""
    meta = source.meta
    k = await node.call(address, key, "attach", (meta, rest, node.address),
                        timeout_s=CHUNK_TIMEOUT_S)
    total, inflight = nchunks(meta), []
    wake = asyncio.Event()

    def woken(_: Any = None) -> None:
        node.call_in_loop(wake.set)

    source.on_progress = wake.set
    try:
        while True:
            wake.clear()
            if source.error is not None:
                raise RelayError(f"this receiver's copy was dropped: {source.error}")
            for fut in [f for f in inflight if f.done()]:
                inflight.remove(fut)
                fut.result()  # raises the link's failure
            while k < source.have and len(inflight) < CREDITS:
                fut = node.call(address, key, "chunk", (meta["tid"], k, source.pieces(k)),
                                timeout_s=CHUNK_TIMEOUT_S)
                fut.add_done_callback(woken)
                inflight.append(fut)
                k += 1
            if k >= total and not inflight:
                return
            await wake.wait()
    finally:
        source.on_progress = _nothing


class Transfers:
    """A receiver's transfers by id; `on_value(meta, value, via)` when one is complete."""

    def __init__(self, node: Any, on_value: Callable[[dict, Any, str], None]) -> None:
        self._node = node
        self._on_value = on_value
        self._live: dict[str, Incoming] = {}
        self._done: dict[str, Incoming] = {}
        self._via: dict[str, str] = {}

    def attach(self, meta: dict, chain: list, via: str) -> int:
        """Start (or resume) receiving `meta`'s transfer; the chunks already held."""
        tid = meta["tid"]
        self._via[tid] = via
        if tid in self._done:
            return nchunks(meta)
        incoming = self._live.get(tid)
        if incoming is None:
            incoming = self._live[tid] = Incoming(meta)
            incoming.last_chunk = self._node.now()
            incoming.relay = asyncio.ensure_future(relay(self._node, incoming, chain))
            # Passed on: the buffer is the user's value now, not ours to keep alive.
            incoming.relay.add_done_callback(lambda _: incoming.release())
            self._node.loop.call_later(IDLE_S, self._check_idle, tid)
            if incoming.have == nchunks(meta):  # an empty payload
                self._complete(tid, incoming)
        return incoming.have

    def chunk(self, tid: str, k: int, pieces: list) -> None:
        incoming = self._live.get(tid)
        if incoming is None:
            if tid in self._done:
                return
            raise RelayError(f"no transfer {tid!r} here (never attached, or dropped after "
                             f"{IDLE_S:.0f} s without a chunk)")
        if incoming.put(k, pieces, self._node.now()):
            self._complete(tid, incoming)

    async def finish(self, tid: str) -> dict:
        incoming = self._live.get(tid) or self._done.get(tid)
        if incoming is None:
            raise RelayError(f"no transfer {tid!r} here")
        await incoming.received
        return await asyncio.shield(incoming.relay) if incoming.relay else {}

    def _complete(self, tid: str, incoming: Incoming) -> None:
        self._live.pop(tid, None)
        self._done[tid] = incoming
        while len(self._done) > _KEEP_DONE:
            self._done.pop(next(iter(self._done)))
        try:
            value = incoming.decode()
        except Exception as exc:
            incoming.received.set_exception(exc)
            return
        incoming.received.set_result(None)
        self._on_value(incoming.meta, value, self._via.pop(tid, ""))
        if incoming.relay is not None and incoming.relay.done():
            incoming.release()

    def _check_idle(self, tid: str) -> None:
        incoming = self._live.get(tid)
        if incoming is None:
            return
        idle = self._node.now() - incoming.last_chunk
        if idle < IDLE_S:
            self._node.loop.call_later(IDLE_S - idle, self._check_idle, tid)
            return
        del self._live[tid]
        self._via.pop(tid, None)
        incoming.drop(RelayError(f"transfer {tid!r}: no chunk for {IDLE_S:.0f} s (its "
                                 "sender is gone)"))

    def close(self) -> None:
        for incoming in self._live.values():
            incoming.drop(RelayError("the receiver closed"))
            if incoming.relay is not None:
                incoming.relay.cancel()
                with contextlib.suppress(BaseException):
                    incoming.relay.exception()
        self._live.clear()
