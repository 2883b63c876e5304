"""A call's big frames to another host on the bulk path, not in the CURVE message.

Not the call protocol (messages.py, node.py) nor the transport (bulk.py, bulk_fetch.py):
only the hand-over of big buffer frames on both sides of a call.

- **Caller** (`BulkCalls.spill`, from Node.call): a CALL or CAST to an address on another
  host (not loopback, not ipc) whose buffer frames include one of at least
  `BulkConfig.min_call_bytes` sends those frames on the bulk path: they are laid out as one
  stream (bulk.Layout), offered on this node's bulk server under a fresh key, replaced by
  empty frames, and a **table frame** is appended: the 16 bytes TABLE_MAGIC, then msgpack
  `[endpoint, tid, token, algorithm, key, total, chunk, [[buffer index, offset, size], ...]]`.
  The CALL itself, table and key included, travels on the CURVE connection as always. The
  offer is withdrawn when the call ends (answered, failed, timed out); a cast's when every
  chunk was sent once, or after `shm_hold_s`.
- **Callee** (`BulkCalls.receive`, from the loop's request handler): pulls the frames
  (bulk_fetch.Fetch, every chunk checked and opened on the pool into one buffer), then
  hands the call on with read-only views of that buffer in place of the empty frames, as
  if it had arrived whole. A fetch that fails (a bad chunk, the caller gone, the deadline)
  answers the call with `protocol` naming why; the method never runs. Calls from the same
  caller that arrive meanwhile wait behind it, so calls are run in the order sent.
"""

from __future__ import annotations

import collections
import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack

from iris.actors import shm_scope
from iris.actors.bulk import TOKEN_BYTES, Grant, Layout, SealingOffer
from iris.actors.bulk_fetch import Fetch
from iris.actors.bulk_seal import ALGORITHMS, BulkError
from iris.base.errors import PeerUnavailableError, ProtocolError
from iris.base.ids import new_id
from iris.wire import messages

if TYPE_CHECKING:
    from iris.actors.bulk import Bulk

_log = logging.getLogger(__name__)
TABLE_MAGIC = b"\x00iris-bulk-v1\x00\xfb\xfa"  # 16 bytes, unlike shm.MAGIC
MAX_CHUNK_BYTES = 64 << 20


def is_table(frame: Any) -> bool:
    """Is this buffer frame a bulk table (the last frame of a spilled call)?"""
    try:
        return 16 < len(frame) < 65536 and bytes(memoryview(frame)[:16]) == TABLE_MAGIC
    except TypeError:
        return False


def _nbytes(frame: Any) -> int:
    return len(frame) if type(frame) is bytes else memoryview(frame).nbytes


class BulkCalls:
    """Both sides of big call frames for one node (see the module docstring)."""

    def __init__(self, bulk: Bulk):
        self._bulk = bulk
        self._node = bulk.node
        # callers (routing ids) with a call being fetched -> requests that came after it
        self._held: dict[Any, collections.deque] = {}
        self._releasing: Any = None
        self.sent = 0  # calls whose frames went on the bulk path
        self.received = 0  # calls whose frames were fetched here

    # ------------------------------------------------------------ caller (any thread)

    def wants(self, address: str, frames: list) -> bool:
        least = self._bulk.config.min_call_bytes
        return (least > 0 and address != self._node.address and not shm_scope.same_host(address)
                and any(_nbytes(f) >= least for f in frames[1:]))

    def wants_reply(self, frames: list) -> bool:
        """A reply with a big frame from a node reachable from other hosts (bound to a
        routable address: its caller may be anywhere)."""
        least = self._bulk.config.min_call_bytes
        return (least > 0 and not shm_scope.same_host(self._node.address)
                and any(_nbytes(f) >= least for f in frames[1:]))

    def spill(self, frames: list, fut: Any, oneway: bool, hold_s: float) -> list:
        """A call's `frames` with the big buffers on the bulk path (offered now, withdrawn
        when `fut` is done, or for a cast once sent or after `hold_s`)."""
        out, offer = self._offer(frames)
        self.sent += 1
        if oneway:
            self._withdraw_once_sent(offer, hold_s)
        else:
            fut.add_done_callback(lambda _: self._node.call_in_loop(
                self._bulk.withdraw, offer.tid, offer))
        return out

    def spill_reply(self, frames: list, hold_s: float) -> list:
        """A reply's `frames` ([header, *buffers]) with the big buffers on the bulk path,
        offered until pulled once, or for `hold_s` (as they are if this node is stopping)."""
        try:
            out, offer = self._offer(frames)
        except PeerUnavailableError:
            return frames
        self.sent += 1
        self._withdraw_once_sent(offer, hold_s)
        return out

    def _offer(self, frames: list) -> tuple[list, SealingOffer]:
        """frames[1:] of at least min_call_bytes offered under a fresh key; the frames to
        send instead (empty frames in their place, the table frame last)."""
        bulk, node = self._bulk, self._node
        least = bulk.config.min_call_bytes
        big = [i for i, f in enumerate(frames[1:]) if _nbytes(f) >= least]
        chunk = bulk.config.chunk_bytes
        layout = Layout([frames[1 + i] for i in big], chunk)
        tid = new_id("call-", 12)
        offer = SealingOffer(tid, layout, bulk.new_key(tid, layout.total, chunk), bulk)
        token = secrets.token_bytes(TOKEN_BYTES)
        endpoint = bulk.endpoint()
        node.call_in_loop(bulk.offer, offer, token)  # before the message is posted: FIFO
        spans = [[1 + i, offset, size] for i, (offset, size) in zip(big, layout.spans,
                                                                       strict=True)]
        table = TABLE_MAGIC + msgpack.packb([endpoint, tid, token, offer.key.algorithm,
                                             offer.key.secret(), layout.total, chunk, spans])
        out = list(frames)
        for i in big:
            out[1 + i] = b""
        out.append(table)
        return out, offer

    def _withdraw_once_sent(self, offer: SealingOffer, hold_s: float) -> None:
        bulk, node = self._bulk, self._node
        left = [offer.key.nchunks]

        def one_sent(_: int) -> None:
            left[0] -= 1
            if left[0] <= 0:
                bulk.withdraw(offer.tid, offer)

        offer.on_sent = one_sent
        node.call_in_loop(lambda: node.loop.call_later(hold_s, bulk.withdraw, offer.tid, offer))

    # ------------------------------------------------------------ callee (loop thread)

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def hold(self, rid: Any, header: bytes, buffers: list, role: str | None) -> bool:
        """Queue a call behind a call of the same caller still being fetched (a PING is
        answered at once: the caller must hear that this node is alive meanwhile)."""
        queue = self._held.get(rid)
        if queue is None or rid == self._releasing:
            return False
        peek = messages.peek_call(header)
        if peek is None or peek[0] not in (messages.CALL, messages.CAST):
            return False
        if len(queue) >= self._node.config.max_waiting_calls:  # a flood: refused, unrun
            self._refuse(rid, header, "too many calls waiting behind one whose big frames "
                         "are being fetched")
            return True
        queue.append((header, buffers, role))
        return True

    def receive(self, rid: Any, header: bytes, buffers: list, role: str | None) -> None:
        """A request whose last buffer frame is a bulk table: fetch, then deliver it."""
        self._held.setdefault(rid, collections.deque())
        try:
            self._fetch_call(rid, header, buffers, role)
        except Exception as exc:  # never leave the caller's later calls held
            why = exc if isinstance(exc, BulkError) else f"{type(exc).__name__}: {exc}"
            self._refuse(rid, header, f"its big frames cannot be fetched: {why}")
            self._release(rid)

    def _fetch_call(self, rid: Any, header: bytes, table: list, role: str | None) -> None:
        msg = _call_fields(header)
        node = self._node
        deadline = node.now() + (msg[5] / 1000 if msg[1] == messages.CALL
                                 else node.config.shm_hold_s)
        what = f"{msg[3]}.{msg[4]}"

        def done(buffers: list | None, why: str) -> None:
            self.delivered(rid, header, buffers if buffers is not None else table, role,
                           why and f"{what}: its big frames could not be fetched from the "
                           f"caller: {why}")

        _log.debug("node %s: fetching the big frames of %s", node.id, what)
        _Fetching(self._bulk, table, deadline, done)

    def receive_reply(self, peer: Any, header: bytes, table: list) -> None:
        """A reply whose last buffer frame is a bulk table: fetch it while its call stays
        pending (its deadline and the peer's liveness still apply), then complete it."""
        node = self._node
        peek = messages.peek_call(header)
        fut = peer.pending.get(peek[1]) if peek is not None else None
        if fut is None:
            node.stats.late_replies += 1
            return
        call_id = peek[1]

        def done(buffers: list | None, why: str) -> None:
            if call_id not in peer.pending:  # timed out, or the peer died, meanwhile
                return
            if buffers is not None:
                self.received += 1
                peer.on_reply(header, buffers, node.now())
                return
            node.stats.malformed += 1
            peer.pending.pop(call_id).set_exception(ProtocolError(
                f"reply of {fut.actor}.{fut.method} from {peer.address}: its big frames "
                f"could not be fetched: {why}"))

        try:
            _Fetching(self._bulk, table, node.now() + node.config.shm_hold_s, done)
        except BulkError as exc:
            done(None, str(exc))

    def delivered(self, rid: Any, header: bytes, buffers: list, role: str | None,
                  why: str = "") -> None:
        """A fetch ended: run the call (`buffers` in place of its table) or, with `why`,
        answer why not; then what waited behind it."""
        if why:
            self._refuse(rid, header, why)
        else:
            self.received += 1
            self._deliver(rid, header, buffers, role)
        self._release(rid)

    def _release(self, rid: Any) -> None:
        queue = self._held.get(rid)
        while queue:
            header, buffers, role = queue.popleft()
            if buffers and is_table(buffers[-1]):
                try:
                    self._fetch_call(rid, header, buffers, role)
                    return  # still holding the rest behind it
                except Exception as exc:
                    self._refuse(rid, header, f"its big frames cannot be fetched: {exc}")
                    continue
            self._deliver(rid, header, buffers, role)
        self._held.pop(rid, None)

    def _deliver(self, rid: Any, header: bytes, buffers: list, role: str | None) -> None:
        self._releasing = rid
        try:
            self._node.on_request(rid, header, buffers, role)
        finally:
            self._releasing = None

    def _refuse(self, rid: Any, header: bytes, why: str) -> None:
        peek = messages.peek_call(header)
        self._node.stats.malformed += 1
        if peek is None or peek[0] != messages.CALL:
            _log.warning("node %s dropped a cast: %s", self._node.id, why)
            return
        self._node.send_reply(rid, messages.encode_error(peek[1], messages.E_PROTOCOL, why))


def _call_fields(header: bytes) -> list:
    """[version, kind, call_id, actor, method, timeout_ms] of a CALL or CAST header, read
    without its buffers (they are not here yet); BulkError if it is not one."""
    try:
        unpacker = msgpack.Unpacker(raw=False, ext_hook=lambda code, data: None)
        unpacker.feed(header)
        if unpacker.read_array_header() < 8:
            raise ValueError("too few fields")
        fields = [unpacker.unpack() for _ in range(6)]
    except Exception as exc:
        raise BulkError(f"a bulk table on a malformed message: {exc}") from None
    if (fields[1] not in (messages.CALL, messages.CAST) or type(fields[2]) is not int
            or type(fields[3]) is not str or type(fields[4]) is not str
            or type(fields[5]) is not int):
        raise BulkError("a bulk table on a message that is not a call")
    return fields


class _Fetching:
    """One message's big frames being fetched: `buffers` (its buffer frames, the table
    last) into one buffer (a bulk_fetch.Sink); `done(buffers in place, "")` or
    `done(None, why)` once, on the loop thread."""

    def __init__(self, bulk: Bulk, buffers: list, deadline: float,
                 done: Callable[[list | None, str], None]):
        try:
            endpoint, tid, token, algorithm, secret, total, chunk, spans = msgpack.unpackb(
                bytes(memoryview(buffers[-1])[len(TABLE_MAGIC):]))
        except Exception as exc:
            raise BulkError(f"malformed bulk table: {exc}") from None
        _check(bulk.node.config.max_frame_bytes, buffers, total, chunk, spans, algorithm)
        self._buffers, self._spans, self._done = buffers, spans, done
        grant = Grant.from_wire([endpoint, token, algorithm, secret])
        self.key = bulk.accept_key(grant, tid, total, chunk)
        self.view = bulk.buffers.take(total)
        self._left = self.key.nchunks
        if self._left == 0:
            self._finish(None)
            return
        Fetch(bulk, grant, tid, self, range(self._left), deadline)

    # bulk_fetch.Sink

    def arrived(self, k: int, sealed: Any) -> None:
        pass

    def opened(self, k: int) -> None:
        self._left -= 1
        if self._left == 0:
            self._finish(None)

    def fetch_failed(self, fetch: Any, error: BulkError, fatal: bool) -> None:
        self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        done, self._done = self._done, None
        if done is None:
            return
        if error is not None:
            self.view = memoryview(b"")
            done(None, str(error))
            return
        whole = self.view.toreadonly()
        buffers = list(self._buffers[:-1])
        for index, offset, size in self._spans:
            buffers[index - 1] = whole[offset:offset + size]
        self.view = memoryview(b"")
        done(buffers, "")


def _check(limit: int, buffers: list, total: Any, chunk: Any, spans: Any,
           algorithm: Any) -> None:
    """A table's fields, each checked against the message it came with (BulkError)."""
    if (type(total) is not int or type(chunk) is not int or not 0 < chunk <= MAX_CHUNK_BYTES
            or algorithm not in ALGORITHMS or type(spans) is not list
            or not 0 <= total <= limit * max(1, len(spans))):
        raise BulkError("malformed bulk table: bad total, chunk, algorithm or spans")
    for span in spans:
        if (type(span) is not list or len(span) != 3 or any(type(x) is not int for x in span)
                or not 1 <= span[0] < len(buffers) or _nbytes(buffers[span[0] - 1])
                or span[1] < 0 or not 0 <= span[2] <= limit or span[1] + span[2] > total):
            raise BulkError(f"malformed bulk table: span {span!r}")
