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
from typing import TYPE_CHECKING, Any

import msgpack

from iris.actors import shm_scope
from iris.actors.bulk import TOKEN_BYTES, Grant, Layout, SealingOffer
from iris.actors.bulk_seal import ALGORITHMS, BulkError
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
        return len(frame) > len(TABLE_MAGIC) and bytes(
            memoryview(frame)[:len(TABLE_MAGIC)]) == TABLE_MAGIC
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

    def spill(self, frames: list, fut: Any, oneway: bool, hold_s: float) -> list:
        """`frames` with the big buffers on the bulk path (offered now, withdrawn when
        `fut` is done, or for a cast when sent or after `hold_s`)."""
        bulk, node = self._bulk, self._node
        least = bulk.config.min_call_bytes
        big = [i for i, f in enumerate(frames[1:]) if _nbytes(f) >= least]
        chunk = bulk.config.chunk_bytes
        layout = Layout([frames[1 + i] for i in big], chunk)
        tid = new_id("call-", 12)
        offer = SealingOffer(tid, layout, bulk.new_key(tid, layout.total, chunk), bulk)
        token = secrets.token_bytes(TOKEN_BYTES)
        endpoint = bulk.endpoint()
        node.call_in_loop(bulk.offer, offer, token)  # before the call is posted: FIFO
        spans = [[1 + i, offset, size] for i, (offset, size) in zip(big, layout.spans,
                                                                       strict=True)]
        table = TABLE_MAGIC + msgpack.packb([endpoint, tid, token, offer.key.algorithm,
                                             offer.key.secret(), layout.total, chunk, spans])
        out = list(frames)
        for i in big:
            out[1 + i] = b""
        out.append(table)
        self.sent += 1
        if oneway:
            left = [offer.key.nchunks]

            def one_sent(_: int) -> None:
                left[0] -= 1
                if left[0] <= 0:
                    bulk.withdraw(tid, offer)

            offer.on_sent = one_sent
            node.call_in_loop(lambda: node.loop.call_later(hold_s, bulk.withdraw, tid, offer))
        else:
            fut.add_done_callback(lambda _: node.call_in_loop(bulk.withdraw, tid, offer))
        return out

    # ------------------------------------------------------------ callee (loop thread)

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def hold(self, rid: Any, frames: list, role: str | None) -> bool:
        """Queue a call behind a call of the same caller still being fetched (a PING is
        answered at once: the caller must hear that this node is alive meanwhile)."""
        queue = self._held.get(rid)
        if queue is None or rid == self._releasing:
            return False
        peek = messages.peek_call(frames[1].bytes) if len(frames) > 1 else None
        if peek is None or peek[0] not in (messages.CALL, messages.CAST):
            return False
        queue.append((frames, role))
        return True

    def receive(self, frames: list, role: str | None) -> None:
        """A request whose last buffer frame is a bulk table: fetch, then deliver it."""
        rid = frames[0].bytes
        _log.debug("node %s: fetching the big frames of a call", self._node.id)
        self._held.setdefault(rid, collections.deque())
        try:
            _Fetching(self, rid, frames, role)
        except BulkError as exc:
            self._refuse(rid, frames, f"its big frames cannot be fetched: {exc}")
            self._release(rid)

    def delivered(self, rid: Any, frames: list, role: str | None, why: str = "") -> None:
        """A fetch ended: run the call (`frames` with its buffers in place) or, with `why`,
        answer why not; then what waited behind it."""
        if why:
            self._refuse(rid, frames, why)
        else:
            self.received += 1
            self._deliver(rid, frames, role)
        self._release(rid)

    def _release(self, rid: Any) -> None:
        queue = self._held.get(rid)
        while queue:
            frames, role = queue.popleft()
            if len(frames) > 2 and is_table(frames[-1]):
                try:
                    _Fetching(self, rid, frames, role)
                    return  # still holding the rest behind it
                except BulkError as exc:
                    self._refuse(rid, frames, f"its big frames cannot be fetched: {exc}")
                    continue
            self._deliver(rid, frames, role)
        self._held.pop(rid, None)

    def _deliver(self, rid: Any, frames: list, role: str | None) -> None:
        self._releasing = rid
        try:
            self._node._on_request(frames, role)
        finally:
            self._releasing = None

    def _refuse(self, rid: Any, frames: list, why: str) -> None:
        peek = messages.peek_call(frames[1].bytes)
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
    """One call being fetched: its buffer (a bulk_fetch.Sink) and its Fetch."""

    def __init__(self, calls: BulkCalls, rid: Any, frames: list, role: str | None):
        self._calls, self._rid, self._frames, self._role = calls, rid, frames, role
        bulk = calls._bulk
        buffers = frames[2:]
        msg = _call_fields(frames[1].bytes)
        try:
            endpoint, tid, token, algorithm, secret, total, chunk, spans = msgpack.unpackb(
                bytes(memoryview(buffers[-1])[len(TABLE_MAGIC):]))
        except Exception as exc:
            raise BulkError(f"malformed bulk table: {exc}") from None
        self._what = f"{msg[3]}.{msg[4]}"
        self._check(bulk, buffers, total, chunk, spans, algorithm)
        self._spans = spans
        grant = Grant.from_wire([endpoint, token, algorithm, secret])
        self.key = bulk.accept_key(grant, tid, total, chunk)
        self.view = bulk.buffers.take(total)
        self._left = self.key.nchunks
        self._done = False
        deadline = calls._node.now() + msg[5] / 1000 if msg[1] == messages.CALL else \
            calls._node.now() + calls._node.config.shm_hold_s
        if self._left == 0:
            self._finish(None)
            return
        from iris.actors.bulk_fetch import Fetch

        Fetch(bulk, grant, tid, self, range(self._left), deadline)

    def _check(self, bulk: Bulk, buffers: list, total: Any, chunk: Any, spans: Any,
               algorithm: Any) -> None:
        limit = self._calls._node.config.max_frame_bytes
        if (type(total) is not int or type(chunk) is not int or not 0 < chunk <= MAX_CHUNK_BYTES
                or algorithm not in ALGORITHMS or type(spans) is not list
                or not 0 <= total <= limit * max(1, len(spans))):
            raise BulkError("malformed bulk table: bad total, chunk, algorithm or spans")
        for span in spans:
            if (type(span) is not list or len(span) != 3 or any(type(x) is not int for x in span)
                    or not 1 <= span[0] < len(buffers) or _nbytes(buffers[span[0] - 1])
                    or span[1] < 0 or not 0 <= span[2] <= limit or span[1] + span[2] > total):
                raise BulkError(f"malformed bulk table: span {span!r}")

    # ------------------------------------------------------------ bulk_fetch.Sink

    def arrived(self, k: int, sealed: Any) -> None:
        pass

    def opened(self, k: int) -> None:
        self._left -= 1
        if self._left == 0:
            self._finish(None)

    def fetch_failed(self, fetch: Any, error: BulkError, fatal: bool) -> None:
        self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        if error is not None:
            self.view = memoryview(b"")
            self._calls.delivered(self._rid, self._frames, self._role,
                                  f"{self._what}: its big frames could not be fetched from the "
                                  f"caller: {error}")
            return
        whole = self.view.toreadonly()
        buffers = list(self._frames[2:-1])
        for index, offset, size in self._spans:
            buffers[index - 1] = whole[offset:offset + size]
        frames = [self._frames[0], self._frames[1], *buffers]
        self.view = memoryview(b"")
        self._calls.delivered(self._rid, frames, self._role, "")
