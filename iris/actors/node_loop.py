"""NodeLoop: a node's event loop and what it owns — the ROUTER, one DEALER per peer, the calls
waiting on them with their deadlines, work posted by other threads, and the periodic sweep.

Not what arrives means (requests are handed to the node through the `Inbound` interface
below; replies complete their futures in peers.Peer.on_reply) nor lifecycle, hosting or
shared memory (node.py). Every socket is read on the loop thread with `add_reader` on its ZeroMQ FD
and drained with NOBLOCK loops: on this machine that did ~100k calls/s where zmq.asyncio did
~25k. Other threads reach the loop through `post` / `call_in_loop` (work appended to the
outbox, the loop woken at most once per batch); they never touch a socket.

The ZeroMQ FD is edge-triggered: after any send, incoming messages may be waiting without a
new wake-up, so every socket we send on is drained again before the loop sleeps.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import uvloop
import zmq

from iris.actors import sockio, wakers
from iris.actors.actor_spec import INTERNAL
from iris.actors.config import NodeConfig
from iris.actors.future import ActorFuture
from iris.actors.peers import DeadlineQueue, LocalPeer, LocalReturn, Peer
from iris.actors.stats import NodeStats
from iris.base.errors import (
    DeadlineExceededError,
    PeerUnavailableError,
)

_log = logging.getLogger(__name__)
# A sweep this much later than its interval is the loop's own stall, not peers' silence.
_STALL_S = 1.0


class Inbound(Protocol):
    """What a NodeLoop hands up to its node (Node implements it): requests, and the few
    questions about them only the node can answer."""

    def on_request(self, rid: Any, header: bytes, buffers: list,
                   role: str | None = None) -> None:
        """A CALL, CAST or PING arrived from `rid` (loop thread)."""

    def serves(self, actor: str) -> bool:
        """Is `actor` hosted here (a call to it goes through its mailbox, not a socket)?"""

    def on_bulk_reply(self, peer: Peer, header: bytes, buffers: list) -> None:
        """A reply whose big frames wait on the bulk path (bulk_calls.is_table)."""

    def on_sweep(self, now: float) -> None:
        """The periodic sweep ran (loop thread): the node's own housekeeping."""


class NodeLoop:
    """The loop thread's side of one node (see the module docstring). Methods run on the
    loop thread unless their docstring says "any thread"."""

    # A pass is one callback of the loop (posted work, a socket readable, the sweep). What it
    # leaves to do is done when it ends (_end_pass), not in a callback of its own: each extra
    # callback is another turn of the loop (an epoll_wait) before a woken thread can run.

    def __init__(self, node_id: str, config: NodeConfig, stats: NodeStats,
                 now: Callable[[], float], new_socket: Callable[[int], zmq.Socket],
                 inbound: Inbound):
        self.id = node_id
        self.config = config
        self.stats = stats  # shared with the node: each counts its own fields
        self.now = now
        self.new_socket = new_socket
        self._inbound = inbound
        self.on_bulk_reply = inbound.on_bulk_reply  # for Peer.on_reply
        self.loop = uvloop.new_event_loop()
        self.thread_id = 0  # the loop thread's ident, once it runs
        self.address = ""
        self._router: zmq.Socket | None = None
        self.peers: dict[str, Peer] = {}
        self._local: LocalPeer | None = None  # made on the first in-process call
        # When the last sweep ran (run() sets it as it asks for the first): a sweep far
        # later than asked is this loop's own stall, not its peers' silence (_note_stall).
        self._last_sweep = now()
        self._deadlines = DeadlineQueue()
        self._outbox: collections.deque = collections.deque()
        self._wake_pending = False
        self._waker = wakers.Waker()  # wakes the loop without the GIL (post, idle=True)
        self._wakes_due: list = []  # Wakers to wake when this pass of the loop ends
        self._dirty_peers: set[Peer] = set()
        self._router_dirty = False
        self._drain_scheduled = False
        self._in_pass = False  # a loop callback runs; it ends with _end_pass

    # ------------------------------------------------------------ lifecycle

    def run(self, router: zmq.Socket, address: str, ready: Callable[[], None]) -> None:
        """(The loop thread) Serve `router`, bound at `address`, until stop(); `ready()` is
        called once everything is registered."""
        self.thread_id = threading.get_ident()
        self._router, self.address = router, address
        self.loop.add_reader(router.getsockopt(zmq.FD), self._on_router_readable)
        self.loop.add_reader(self._waker.fileno(), self._on_waker)
        self._last_sweep = self.now()  # a stall before the first sweep is a stall too
        self.loop.call_later(self.config.sweep_interval_s, self._sweep)
        ready()
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def in_loop_thread(self) -> bool:
        """(Any thread.)"""
        return threading.get_ident() == self.thread_id

    def fail_pending(self) -> None:
        """Fail every call waiting for a reply (the node is stopping)."""
        for peer in [*self.peers.values(), *([self._local] if self._local else [])]:
            peer.fail_all("this node is stopping", counted=False)

    def close_sockets(self) -> None:
        """Send what is posted, fail what waits, close every socket (the node is stopping)."""
        self._flush_outbox()
        for peer in self.peers.values():
            peer.fail_all("this node is stopping", counted=False)
            peer.close()
        self.peers.clear()
        self.loop.remove_reader(self._waker.fileno())  # its fd closes with the node
        if self._router is not None:
            self.loop.remove_reader(self._router.getsockopt(zmq.FD))
            self._router.close(linger=0)

    def stop(self) -> None:
        """End the loop, waking the threads still owed a wake-up (their calls failed)."""
        self._wake_due_now()
        self.loop.stop()

    # ------------------------------------------------------------ from other threads

    def post(self, fn: Callable, *args: Any, idle: bool = False) -> None:
        """(Any thread) Run fn(*args) on the loop. `idle`: the posting thread sleeps right
        after, so wake the loop without the GIL (wakers.py says why); otherwise wake it
        holding the GIL, and the poster goes on adding to the same batch (a caller sending
        many calls)."""
        self._outbox.append((fn, args))
        if not self._wake_pending:
            self._wake_pending = True
            if idle:
                self._waker.wake()
                return
            try:
                self.loop.call_soon_threadsafe(self._flush_outbox)
            except RuntimeError:  # loop closed: the node stopped under a racing caller
                pass

    def call_in_loop(self, fn: Callable, *args: Any) -> None:
        """(Any thread) Run fn(*args) on the loop thread (soon, or now when already on it)."""
        if threading.get_ident() == self.thread_id:
            fn(*args)
        else:
            self.post(fn, *args)

    def defer_wakes(self, due: list) -> None:
        """Wake these Wakers when this pass of the loop ends: a thread woken in the middle
        of a drain takes the GIL and holds the rest of the drain up."""
        self._wakes_due.extend(due)
        self._schedule_drain()

    # ------------------------------------------------------------ passes

    def _on_waker(self) -> None:
        self._waker.clear()
        self._flush_outbox()

    def _flush_outbox(self) -> None:
        self._in_pass = True
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

    # ------------------------------------------------------------ sending

    def send_call(self, address: str, call_id: int, fut: ActorFuture, frames: list,
                  timeout_s: float, oneway: bool) -> None:
        if address == self.address and self._inbound.serves(fut.actor):
            return self._call_local(call_id, fut, frames, timeout_s, oneway)
        peer = self.peers.get(address)
        if peer is None:
            try:
                peer = self.peers[address] = Peer(self, address)
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
            why = f"its last {peer.refused}" if peer.refused else \
                f"its send queue is full ({self.config.high_water_mark} messages)"
            fut.set_exception(PeerUnavailableError(
                f"cannot send to {address}: {why}", actor=fut.actor, method=fut.method,
                address=address))
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
        self._inbound.on_request(LocalReturn(local), frames[0], frames[1:], INTERNAL)
        if oneway:
            fut.set_result(None)

    def let_go(self, idle_s: float, address: str | None = None) -> int:
        """Close the connection to `address` (to every peer, if None) when no call waits on
        it, nothing is queued for it and nothing was heard from it for `idle_s`: its file
        descriptor, and the receiver's, given back; the next call connects afresh. How many."""
        now, closed = self.now(), 0
        for peer in [self.peers.get(address)] if address is not None else list(self.peers.values()):
            if peer is None or peer.pending or peer in self._dirty_peers or \
                    now - peer.last_heard < idle_s:
                continue
            peer.close()
            del self.peers[peer.address]
            closed += 1
        return closed

    def send_to_peer(self, peer: Peer, frames: list) -> bool:
        try:
            sockio.send_frames(peer.dealer, frames)
        except zmq.Again:
            return False
        finally:
            self._dirty_peers.add(peer)
            if not self._in_pass:
                self._schedule_drain()
        return True

    def send_reply(self, rid: bytes | LocalReturn, frames: list) -> None:
        """Send a reply as it is (big frames already placed: Node.send_reply)."""
        if type(rid) is LocalReturn:  # an in-process call: straight back to its future
            rid.peer.heard(self.now())
            rid.peer.on_reply(frames[0], frames[1:], self.now())
            return
        try:
            sockio.send_frames(self._router, frames, rid)
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

    # ------------------------------------------------------------ receiving

    def _drain_router(self, ask_first: bool = False) -> None:
        """Hand every request waiting on the ROUTER to the node (its FD fired, or
        `ask_first`: we sent on it, see the module docstring)."""
        router = self._router
        if router is None or router.closed:
            return
        on_request = self._inbound.on_request
        for rid, header, buffers in sockio.messages(router, ask_first, self._wake_early,
                                                    sockio.recv_routed):
            try:
                on_request(rid, header, buffers)
            except Exception:  # never let one message kill the loop
                self.stats.malformed += 1
                _log.exception("node %s: failed handling a request", self.id)

    def drain_peer(self, peer: Peer, ask_first: bool = False) -> None:
        """Handle every reply waiting on the peer's DEALER (as _drain_router)."""
        dealer = peer.dealer
        if dealer.closed:
            return
        now = None
        for header, buffers in sockio.messages(dealer, ask_first, self._wake_early,
                                               sockio.recv_reply):
            if now is None:
                now = self.now()
                peer.heard(now)
            try:
                peer.on_reply(header, buffers, now)
            except Exception:
                self.stats.malformed += 1
                _log.exception("node %s: failed handling a reply from %s", self.id, peer.address)

    # ------------------------------------------------------------ sweep

    def _note_stall(self, now: float) -> None:
        """A sweep far later than asked means this loop could not run (a starved process,
        a stopped VM, a long GC), so the silence of its peers meanwhile says nothing: what
        they sent may still sit in the kernel (libzmq's I/O thread was stopped too and reads
        it only now). Each peer's silence then counts from now, as when it was first met: a
        PING after heartbeat_interval_s, declared dead after peer_dead_after_s of silence."""
        last, self._last_sweep = self._last_sweep, now
        if now - last > _STALL_S:
            self.stats.own_stalls += 1
            for peer in self.peers.values():
                peer.restart_silence(now)

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
        for address, peer in list(self.peers.items()):
            if not peer.check_liveness(now, cfg.heartbeat_interval_s, cfg.peer_dead_after_s):
                self.drain_peer(peer, ask_first=True)  # an answer read late is not silence
                if peer.check_liveness(now, cfg.heartbeat_interval_s, cfg.peer_dead_after_s):
                    continue
                peer.fail_all(f"no reply or heartbeat for {cfg.peer_dead_after_s} s "
                              "(the peer is dead or unreachable)")
                peer.close()
                del self.peers[address]
                stats.peers_declared_dead += 1
        self._inbound.on_sweep(now)
        self._drain_dirty()
        self.loop.call_later(cfg.sweep_interval_s, self._sweep)
