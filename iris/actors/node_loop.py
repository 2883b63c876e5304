"""The half of a Node that runs on its loop thread: posted work, sends, socket drains, the
dispatch of requests and replies, and the periodic sweep of deadlines and peers.

Not the Node's public face (node.py: lifecycle, hosting, calls from any thread, shared
memory). `NodeLoop` is a mixin of Node and reads the state Node.__init__ makes; nothing here
is called from another thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import zmq

from iris.actors import bulk_calls, shm, shm_scope
from iris.actors.future import ActorFuture
from iris.actors.hosting import INTERNAL
from iris.actors.peers import LocalPeer, LocalReturn, Peer
from iris.base.errors import (
    DeadlineExceededError,
    PeerUnavailableError,
    ProtocolError,
)
from iris.wire import messages, remote_errors

_log = logging.getLogger(__name__)
# Plain ints, not the flag enums: pyzmq's send_multipart/recv_multipart wrappers combine
# enum flags and query RCVMORE per frame, which cost 2.5-3.6 us a message against 1.2-1.3
# us for these loops (measured here on a 2-frame message).
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
# A sweep this much later than its interval is the loop's own stall, not peers' silence.
_STALL_S = 1.0


_zget = zmq.backend.Socket.get
_EVENTS = zmq.EVENTS
_POLLIN = int(zmq.POLLIN)
_CLIENT = ("client", None)  # the role of a call whose auth this node does not know


def _waiting(sock: zmq.Socket) -> bool:
    """Is a message waiting on `sock`? (ZMQ_EVENTS; False once the socket is closed.)"""
    try:
        return bool(_zget(sock, _EVENTS) & _POLLIN)
    except zmq.ZMQError:
        return False


def _messages(sock: zmq.Socket, lock: Any, ask_first: bool, after_first: Callable[[], None]):
    """Every message waiting on `sock`, as frames, each read holding `lock` (the socket's:
    a 1:1 caller or an idle actor thread may send on it too, see Node.send_direct). "Anything
    waiting?" costs less asked with ZMQ_EVENTS than by a recv that fails (pyzmq builds and
    raises an Again each time; bench/call_costs.py), so it is asked that way before the
    first recv when nothing may be there (`ask_first`: a check after our own sends), and
    after the first message (one a wake-up is the 1:1 call's case), once `after_first()` has
    run (it wakes the thread the message was for, which gets going while we look for more).
    A burst is then read until Again."""
    if ask_first:
        with lock:
            if not _waiting(sock):
                return
    first = True
    while True:
        with lock:
            try:
                frames = _recv_frames(sock)
            except zmq.Again:
                return
        yield frames
        if first:
            first = False
            after_first()
            with lock:
                if not _waiting(sock):
                    return


def _recv_frames(sock: zmq.Socket) -> list:
    """One whole message as zmq Frames; raises zmq.Again when none is waiting."""
    frame = sock.recv(_NOBLOCK, copy=False)
    frames = [frame]
    while frame.more:
        frame = sock.recv(_NOBLOCK, copy=False)
        frames.append(frame)
    return frames


# Frames below this are copied into the ZeroMQ message: cheaper than the zero-copy hand-off
# (a Frame object and a release callback) up to about pyzmq's own copy_threshold of 64 KiB.
_COPY_BELOW = 64 * 1024
# pyzmq's Socket.send is a Python wrapper (for DRAFT sockets' routing_id and group keywords)
# around its backend's, called with keywords: the backend's own, called positionally, costs
# 0.25 us a frame against 0.42 us (bench/call_costs.py).
_zsend = zmq.backend.Socket.send


def _send_frames(sock: zmq.Socket, frames: list, first: bytes | None = None) -> None:
    """Send one message, `first` (a routing id) before `frames` if given; small bytes are
    copied, big frames are not."""
    if first is not None:
        _zsend(sock, first, _NOBLOCK | _SNDMORE, True)  # may raise: nothing sent then
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        _zsend(sock, frame, _NOBLOCK | _SNDMORE if i < last else _NOBLOCK,
               type(frame) is bytes and len(frame) < _COPY_BELOW)


class NodeLoop:
    """Node's loop-thread methods (see the module docstring)."""

    # A pass is one callback of the loop (posted work, a socket readable, the sweep). What it
    # leaves to do is done when it ends (_end_pass), not in a callback of its own: each extra
    # callback is another turn of the loop (an epoll_wait) before a woken thread can run.

    def _on_waker(self) -> None:
        self._waker.clear()
        self._flush_outbox()

    def _flush_outbox(self) -> None:
        self._in_pass = True
        self._flushing = True  # until all taken has run: Node.send_direct keeps FIFO order
        try:
            self._wake_pending = False
            outbox = self._outbox
            while outbox:
                fn, args = outbox.popleft()
                try:
                    fn(*args)
                except Exception:
                    _log.exception("node %s: posted work %s failed", self.id, fn)
        finally:
            self._flushing = False
            self._end_pass()

    def _on_router_readable(self) -> None:
        self._in_pass = True
        try:
            self._drain_router()
        finally:
            self._end_pass()

    def on_peer_readable(self, peer: Peer) -> None:
        self._in_pass = True
        try:
            self.drain_peer(peer)
        finally:
            self._end_pass()

    def _send_call(self, address: str, call_id: int, fut: ActorFuture, frames: list,
                   timeout_s: float, oneway: bool) -> None:
        if address == self.address and fut.actor in self._actors:
            return self._call_local(call_id, fut, frames, timeout_s, oneway)
        peer = self._peers.get(address)
        if peer is None:
            try:
                peer = self._peers[address] = Peer(self, address)
            except zmq.ZMQError as exc:
                fut.set_exception(PeerUnavailableError(
                    f"cannot connect to {address!r}: {exc}", actor=fut.actor,
                    method=fut.method, address=address))
                if not oneway:
                    self.stats.calls_peer_unavailable += 1
                return
        now = self.now()
        if not oneway:
            peer.track(call_id, fut, now)
            self._deadlines.push(now + timeout_s, call_id, peer)
        if not self.send_to_peer(peer, frames):
            peer.pending.pop(call_id, None)
            fut.set_exception(PeerUnavailableError(
                f"send queue to {address} is full ({self.config.high_water_mark} messages)",
                actor=fut.actor, method=fut.method, address=address))
            if not oneway:
                self.stats.calls_peer_unavailable += 1
        elif oneway:
            fut.set_result(None)
        self.stats.calls_sent += 1

    def _call_local(self, call_id: int, fut: ActorFuture, frames: list, timeout_s: float,
                    oneway: bool) -> None:
        """A call to an actor this node hosts, through its mailbox (see LocalPeer)."""
        local = self._local
        if local is None:
            local = self._local = LocalPeer(self)
        if not oneway:
            now = self.now()
            local.track(call_id, fut, now)
            self._deadlines.push(now + timeout_s, call_id, local)
        self.stats.calls_sent += 1
        # The frames as encoded, not copied: buffers reach the codec as the caller's own
        # objects, which it reads through read-only views (codec._view).
        self._on_request(LocalReturn(local), frames[0], frames[1:], INTERNAL)
        if oneway:
            fut.set_result(None)

    def send_to_peer(self, peer: Peer, frames: list) -> bool:
        try:
            with peer.lock:
                _send_frames(peer.dealer, frames)
        except zmq.Again:
            return False
        finally:
            self._dirty_peers.add(peer)
            if not self._in_pass:
                self._schedule_drain()
        return True

    def send_reply(self, rid: bytes, frames: list, spilled: bool = False) -> None:
        if len(frames) > 1 and self._shm_replies and not spilled and type(rid) is bytes \
                and shm_scope.shares_with_caller(rid):
            frames = self._spill_reply(frames)
        elif len(frames) > 1 and not spilled and type(rid) is bytes \
                and self._bulk_calls.wants_reply(frames):
            frames = self._bulk_calls.spill_reply(frames, self.config.shm_hold_s)
        if type(rid) is LocalReturn:  # an in-process call: straight back to its future
            rid.peer.heard(self.now())
            self._on_reply(rid.peer, frames[0], frames[1:], self.now())
            return
        try:
            with self._router_lock:
                _send_frames(self._router, frames, rid)
        except (zmq.Again, zmq.ZMQError):  # caller vanished or is flooding: it will time out
            self.stats.replies_dropped += 1
        self._router_dirty = True
        if not self._in_pass:
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        """Make sure _end_pass runs: at the end of this pass, or as a pass of its own when
        the caller is not in one (an async method's task, a timer)."""
        if not self._in_pass and not self._drain_scheduled:
            self._drain_scheduled = True
            self.loop.call_soon(self._drain_dirty)

    def _drain_dirty(self) -> None:
        self._drain_scheduled = False
        self._in_pass = True
        self._end_pass()

    def _end_pass(self) -> None:
        """Drain the sockets this pass sent on (their FD is edge-triggered: a send can take
        the notice of a message that arrived), then wake the threads it handed work."""
        try:
            if self._router_dirty:
                self._router_dirty = False
                self._drain_router(ask_first=True)
            if self._dirty_peers:
                dirty, self._dirty_peers = self._dirty_peers, set()
                for peer in dirty:
                    self.drain_peer(peer, ask_first=True)
        finally:
            self._in_pass = False
            if self._router_dirty or self._dirty_peers:  # sent while draining: once more
                self._schedule_drain()
            if self._wakes_due:
                self._wake_due_now()

    def _wake_early(self) -> None:
        """Wake now the threads this pass handed work so far (the first message of a drain:
        the 1:1 call's one), instead of after the rest of the pass."""
        if self._wakes_due:
            self._wake_due_now()

    def _wake_due_now(self) -> None:
        due, self._wakes_due = self._wakes_due, []
        for waker in due:
            waker.wake()

    def _drain_router(self, ask_first: bool = False) -> None:
        """Handle every request waiting on the ROUTER (its FD fired, or `ask_first`: we sent
        on it, see the module docstring)."""
        router = self._router
        if router is None or router.closed:
            return
        for frames in _messages(router, self._router_lock, ask_first, self._wake_early):
            if len(frames) < 2:
                self.stats.malformed += 1
                continue
            try:
                self._on_request(frames[0].bytes, frames[1].bytes, frames[2:])
            except Exception:  # never let one message kill the loop
                self.stats.malformed += 1
                _log.exception("node %s: failed handling a request", self.id)

    def _on_request(self, rid: bytes | LocalReturn, header: bytes, buffers: list,
                    role: str | None = None) -> None:
        """One CALL, CAST or PING: `rid` is who sent it (a ROUTER routing id, or LocalReturn
        for an in-process call, whose `role` is INTERNAL)."""
        if self._bulk_calls.holding and self._bulk_calls.hold(rid, header, buffers, role):
            return  # behind a call of the same caller whose frames are being fetched
        try:
            if buffers:
                if bulk_calls.is_table(buffers[-1]):  # big frames on the bulk path: fetch
                    return self._bulk_calls.receive(rid, header, buffers, role)
                buffers = shm.resolve(buffers)
            msg = messages.decode(header, buffers)
        except ProtocolError as exc:
            self.stats.malformed += 1
            _log.debug("node %s dropped a malformed message: %s", self.id, exc)
            peek = messages.peek_call(header) if buffers else None
            if peek is not None and peek[0] == messages.CALL:  # say why, not time out
                self.send_reply(rid, messages.encode_error(peek[1], messages.E_PROTOCOL,
                                                           str(exc)))
            return
        kind = msg[1]
        if kind == messages.CALL or kind == messages.CAST:
            call = messages.call_from(msg, buffers)
            if role is not None:
                call.role = role
            elif call.auth:
                call.role, call.principal = self._grants.get(call.auth, _CLIENT)
            self.stats.calls_received += 1
            hosted = self._actors.get(call.actor)
            if hosted is None:
                known = ", ".join(sorted(self._actors)) or "none"
                if not call.oneway:
                    self.send_reply(rid, messages.encode_error(
                        call.call_id, messages.E_ACTOR_NOT_FOUND,
                        f"no actor {call.actor!r} at {self.address} (serving: {known})"))
                return
            hosted.dispatch(rid, call, self.now() + call.timeout_ms / 1000)
        elif kind == messages.PING:
            self.send_reply(rid, messages.encode_pong(msg[2]))
        else:
            self.stats.malformed += 1  # replies belong on DEALERs, not here

    def drain_peer(self, peer: Peer, ask_first: bool = False) -> None:
        """Handle every reply waiting on the peer's DEALER (as _drain_router)."""
        dealer = peer.dealer
        if dealer.closed:
            return
        now = None
        for frames in _messages(dealer, peer.lock, ask_first, self._wake_early):
            if now is None:
                now = self.now()
                peer.heard(now)
            try:
                self._on_reply(peer, frames[0].bytes, frames[1:], now)
            except Exception:
                self.stats.malformed += 1
                _log.exception("node %s: failed handling a reply from %s", self.id, peer.address)

    def _on_reply(self, peer: Peer, header: bytes, buffers: list, now: float) -> None:
        try:
            if buffers:
                if bulk_calls.is_table(buffers[-1]):  # big frames on the bulk path: fetch
                    return self._bulk_calls.receive_reply(peer, header, buffers)
                buffers = shm.resolve(buffers)
            msg = messages.decode(header, buffers)
        except ProtocolError as exc:
            self.stats.malformed += 1
            peek = messages.peek_call(header) if buffers else None
            fut = peer.pending.pop(peek[1], None) if peek else None
            if fut is not None:  # its buffers are gone (shared memory of a dead sender)
                fut.set_exception(ProtocolError(f"reply of {fut.actor}.{fut.method} from "
                                                f"{peer.address} cannot be read: {exc}"))
            _log.debug("node %s dropped a malformed reply from %s: %s", self.id, peer.address, exc)
            return
        kind = msg[1]
        if kind == messages.PONG:
            return
        fut = peer.pending.pop(msg[2], None) if kind in (messages.REPLY, messages.ERROR) else None
        stats = self.stats
        if fut is None:
            stats.late_replies += 1  # answered after its deadline, or a stray
            return
        stats.call_latency.observe(now - fut.sent_at)
        if kind == messages.REPLY:
            try:
                value = messages.decode_payload(msg[3], msg[4], buffers)
            except Exception as exc:
                stats.calls_error += 1
                fut.set_exception(ProtocolError(
                    f"reply of {fut.actor}.{fut.method} from {peer.address} cannot be "
                    f"decoded here: {exc}"))
                return
            stats.calls_ok += 1
            fut.set_result(value)
        else:
            stats.calls_error += 1
            fut.set_exception(remote_errors.error_from(
                msg[3], msg[4], msg[5], actor=fut.actor, method=fut.method, address=peer.address))

    def _note_stall(self, now: float) -> None:
        """A sweep far later than asked means this loop could not run (a starved process,
        a stopped VM, a long GC): that time counts as nobody's silence (Peer.silent_s)."""
        last, self._last_sweep = self._last_sweep, now
        if last is not None and now - last > _STALL_S:
            self.stalled_s += now - last - self.config.sweep_interval_s

    def _sweep(self) -> None:
        # Runs until the loop stops, even while the node is stopping: actor threads blocked
        # on calls must still see their deadlines.
        now = self.now()
        stats = self.stats
        for call_id, peer in self._deadlines.pop_expired(now):
            fut = peer.pending.pop(call_id)
            stats.calls_timeout += 1
            fut.set_exception(DeadlineExceededError(
                f"{fut.actor}.{fut.method} at {peer.address}: no reply before its deadline",
                actor=fut.actor, method=fut.method, address=peer.address))
        cfg = self.config
        self._note_stall(now)
        for address, peer in list(self._peers.items()):
            if not peer.check_liveness(now, cfg.heartbeat_interval_s, cfg.peer_dead_after_s):
                self.drain_peer(peer, ask_first=True)  # an answer read late is not silence
                if peer.check_liveness(now, cfg.heartbeat_interval_s, cfg.peer_dead_after_s):
                    continue
                peer.fail_all(f"no reply or heartbeat for {cfg.peer_dead_after_s} s "
                              "(the peer is dead or unreachable)")
                peer.close()
                del self._peers[address]
                stats.peers_declared_dead += 1
        if self._pool.busy():
            self._pool.sweep(now)
        self._drain_dirty()
        self.loop.call_later(cfg.sweep_interval_s, self._sweep)
