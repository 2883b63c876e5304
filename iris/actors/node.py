"""Node: this process's endpoint — one ROUTER (its address), one DEALER per peer, one loop thread.

Not actor semantics (hosting.py) nor liveness policy (peers.py). Every socket is owned by a
uvloop event loop running in the node's own thread. Sockets are read with `add_reader` on
the ZeroMQ FD and drained with NOBLOCK loops: on this machine that did ~100k calls/s where
zmq.asyncio did ~25k. Other threads never touch a socket: they append work to `_outbox`
and wake the loop at most once per batch.

The ZeroMQ FD is edge-triggered: after any send, incoming messages may be waiting without a
new wake-up, so every socket we send on is drained again before the loop sleeps.
"""

from __future__ import annotations

import collections
import errno
import itertools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import uvloop
import zmq

from iris.actors import ports, shm, shm_scope, wakers
from iris.actors.bulk import Bulk
from iris.actors.bulk_calls import BulkCalls
from iris.actors.config import NodeConfig
from iris.actors.future import ActorFuture
from iris.actors.hosting import HostedActor, spec_of
from iris.actors.node_loop import NodeLoop, _send_frames, _waiting
from iris.actors.peers import DeadlineQueue, LocalPeer, Peer
from iris.actors.security import Security, check_bind_allowed
from iris.actors.stats import NodeStats
from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import (
    ConfigError,
    ConflictError,
    PeerUnavailableError,
    ProtocolError,
)
from iris.base.histogram import merge_histograms
from iris.base.ids import new_id
from iris.wire import messages

_log = logging.getLogger(__name__)
def _shm_min_bytes(config: NodeConfig) -> int:
    """config.shm_min_bytes, unless $IRIS_SHM_MIN_BYTES says otherwise (0: off)."""
    raw = os.environ.get("IRIS_SHM_MIN_BYTES", "").strip()
    if not raw:
        return config.shm_min_bytes
    if not raw.isdigit():
        raise ConfigError(f"IRIS_SHM_MIN_BYTES={raw!r}: expected a number of bytes (0: off)")
    return int(raw)


class Node(NodeLoop):
    def __init__(self, config: NodeConfig | None = None, *, security: Security | None = None,
                 clock: Clock = SYSTEM_CLOCK):
        self.config = config or NodeConfig()
        self.security = security
        self.clock = clock
        # The clock's own function (no method around it): read a few times on every call.
        self.now: Callable[[], float] = clock.monotonic
        self.id = new_id("node-")
        self.address = ""
        self.stats = NodeStats()
        self.cluster: Any = None  # the ClusterContext this node serves, set by it
        self._ctx = zmq.Context()
        self._ctx.set(zmq.MAX_SOCKETS, self.config.max_sockets)
        self._auth: Any = None
        self.loop = uvloop.new_event_loop()
        self._loop_thread_id = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"iris-{self.id}")
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._router: zmq.Socket | None = None
        # Held around every use of the ROUTER: the loop owns it, but an actor thread with
        # nothing queued sends its reply on it itself (reply_direct).
        self._router_lock = threading.Lock()
        self._peers: dict[str, Peer] = {}
        # Seconds this node's loop could not run (sweeps late by more than a second), kept
        # so that its own stall is never counted as a peer's silence (node_loop._note_stall).
        self.stalled_s = 0.0
        self._last_sweep: float | None = None
        self._actors: dict[str, HostedActor] = {}
        self._deadlines = DeadlineQueue()
        self._outbox: collections.deque = collections.deque()
        self._wake_pending = False
        self._flushing = False  # the loop runs what it took from _outbox (node_loop)
        self._waker = wakers.Waker()  # wakes the loop without the GIL (post_reply, idle=True)
        self._wakes_due: list = []  # Wakers to wake when this pass of the loop ends
        self._dirty_peers: set[Peer] = set()
        self._router_dirty = False
        self._drain_scheduled = False
        self._in_pass = False  # a loop callback runs; it ends with _end_pass (node_loop.py)
        self._call_ids = itertools.count(1)
        self._stopped = False
        # auth token -> (the role its calls hold here, whom it names: a worker's id or None)
        self._grants: dict[bytes, tuple[str, str | None]] = {}
        self._local: LocalPeer | None = None  # made once the address is known
        self._shm_min = _shm_min_bytes(self.config) if shm_scope.AVAILABLE else 0
        self._shm_replies = False  # set once bound: only a loopback node's callers are local
        self._pool = shm.Pool(self.config.shm_pool_bytes)
        self._foreign: set[str] = set()  # same-host peers in another PID namespace
        self.bulk = Bulk(self, self.config.bulk)  # big payloads to other hosts (bulk.py)
        self._bulk_calls = BulkCalls(self.bulk)  # a call's big frames on it (bulk_calls.py)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Node:
        check_bind_allowed(self.config.bind, self.security)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error
        return self

    def stop(self) -> None:
        """Stop: new calls fail, pending calls fail (waking actor threads blocked on them),
        hosted actors stop (their queued calls get ActorDiedError), then sockets close."""
        if self._stopped or not self._thread.is_alive():
            self._stopped = True
            return
        self._stopped = True
        failed = threading.Event()
        self.loop.call_soon_threadsafe(self._fail_pending, failed)
        failed.wait()
        for hosted in list(self._actors.values()):
            hosted.stop()
        done = threading.Event()
        self.loop.call_soon_threadsafe(self._shutdown, done)
        done.wait()
        self._thread.join()
        if self._auth is not None:
            self._auth.stop()
        self._ctx.destroy(linger=0)

    def _fail_pending(self, done: threading.Event) -> None:
        try:
            for peer in [*self._peers.values(), *([self._local] if self._local else [])]:
                peer.fail_all("this node is stopping", counted=False)
        finally:
            done.set()

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        self._loop_thread_id = threading.get_ident()
        try:
            self._auth = self.security.start_authenticator(self._ctx) if self.security else None
            self._router = self._bind_router()
        except BaseException as exc:
            if isinstance(exc, zmq.ZMQError) and exc.errno == errno.EADDRINUSE:
                # One line naming who holds it, not a ZMQError traceback (issue 27).
                exc = ConflictError(ports.in_use(self.config.bind))
            self._start_error = exc
            self._ready.set()
            return
        self._shm_replies = bool(self._shm_min) and shm_scope.same_host(self.address)
        self.loop.add_reader(self._router.getsockopt(zmq.FD), self._on_router_readable)
        self.loop.add_reader(self._waker.fileno(), self._on_waker)
        self.loop.call_later(self.config.sweep_interval_s, self._sweep)
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _bind_router(self) -> zmq.Socket:
        router = self.new_socket(zmq.ROUTER)
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply to a vanished peer raises, counted
        router.setsockopt(zmq.MAXMSGSIZE, self.config.max_frame_bytes)
        if self.security:
            self.security.configure_server(router)
        bind = self.config.bind
        if bind.endswith(":0"):
            port = router.bind_to_random_port(bind.rsplit(":", 1)[0])
            self.address = f"{bind.rsplit(':', 1)[0]}:{port}"
        else:
            router.bind(bind)
            self.address = router.getsockopt_string(zmq.LAST_ENDPOINT)
        return router

    def _shutdown(self, done: threading.Event) -> None:
        try:
            self._flush_outbox()
            for peer in self._peers.values():
                peer.fail_all("this node is stopping", counted=False)
                peer.close()
            self._peers.clear()
            self.bulk.close()
            self._pool.close()
            self.loop.remove_reader(self._waker.fileno())  # its fd closes with the node
            if self._router is not None:
                self.loop.remove_reader(self._router.getsockopt(zmq.FD))
                with self._router_lock:
                    self._router.close(linger=0)
        finally:
            self._wake_due_now()  # threads waiting on the calls failed above: the loop ends
            self.loop.stop()
            done.set()

    def new_socket(self, kind: int) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, self.config.high_water_mark)
        sock.setsockopt(zmq.RCVHWM, self.config.high_water_mark)
        sock.setsockopt(zmq.RECONNECT_IVL, self.config.reconnect_initial_ms)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, self.config.reconnect_max_ms)
        if kind == zmq.DEALER and self.security:
            self.security.configure_client(sock)
        return sock

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self._loop_thread_id

    # ------------------------------------------------------------ hosting

    def host(self, key: str, cls: type, args: tuple = (), kwargs: dict | None = None) -> HostedActor:
        """Serve an instance of actor class `cls` under `key` in this node (blocking)."""
        spec = spec_of(cls)
        if key in self._actors:
            raise ConflictError(f"this node already serves an actor under {key!r}")
        hosted = HostedActor(self, key, spec, args, kwargs or {}, cluster=self.cluster)
        hosted.start()
        self._actors[key] = hosted
        return hosted

    def unhost(self, key: str) -> None:
        hosted = self._actors.get(key)
        if hosted is not None:
            hosted.stop(wait=False)  # stopping before it vanishes: queued calls never run
            self._actors.pop(key, None)
            hosted.stop()

    def hosted(self) -> list[str]:
        return sorted(self._actors)

    def post_to(self, key: str, fn: Callable, *args: Any) -> bool:
        """Run fn(*args) as a turn of the actor hosted here under `key` (HostedActor.post);
        False if no actor is hosted there now (it stopped)."""
        hosted = self._actors.get(key)
        return hosted is not None and hosted.post(fn, *args)

    def backlog(self, key: str) -> int:
        """How many calls and messages wait in the mailbox of the actor hosted under `key`."""
        hosted = self._actors.get(key)
        return hosted.backlog() if hosted is not None else 0

    def served_latency(self) -> dict[str, dict]:
        """Per hosted actor: how long its calls took to handle here, as one histogram dict
        ({"buckets", "count", "sum_s"}). Read from any thread: copies, a sample may lag."""
        return {key: merge_histograms(a.handled_sync.as_dict(), a.handled_async.as_dict())
                for key, a in sorted(dict(self._actors).items())}

    # ------------------------------------------------------------ calling (any thread)

    def grant(self, token: bytes, role: str, principal: str | None = None) -> None:
        """Calls carrying `token` as their auth hold `role` here (docs/protocol.md, Roles);
        `principal`: the one peer the token names (a worker's own credential names its id,
        and a method for that role accepts only calls that name the same id)."""
        self._grants[bytes(token)] = (role, principal)

    def revoke(self, token: bytes) -> None:
        """Calls carrying `token` hold no role here from now on (any thread)."""
        self._grants.pop(bytes(token), None)

    def call(self, address: str, actor: str, method: str, args: tuple = (),
             kwargs: dict | None = None, *, timeout_s: float | None = None,
             oneway: bool = False, auth: bytes | None = None) -> ActorFuture:
        """Send a call; returns at once. Thread-safe. `auth`: a cluster token that gives the
        call a control-plane role at the receiver."""
        timeout_s = self.config.default_timeout_s if timeout_s is None else timeout_s
        call_id = next(self._call_ids)
        fut = outer = self._future(actor, method, address)
        try:
            frames = messages.encode_call(call_id, actor, method, int(timeout_s * 1000),
                                          args, kwargs or {}, oneway, auth)
        except Exception as exc:
            fut.set_exception(TypeError(f"arguments of {actor}.{method} cannot be sent: {exc}"))
            return fut
        segment = None
        if len(frames) > 1 and self._shares_with(address):
            plain = frames
            frames, segment = self._pool.spill(frames, self._shm_min)
            if segment is not None:
                self._pool.sent(segment, 1, 0 if oneway else 1, self.now() + timeout_s)
                if not oneway:
                    fut = self._unless_foreign(call_id, fut, plain, timeout_s)
                    fut.add_done_callback(lambda _: self._pool.answered(segment))
        elif len(frames) > 1 and self._bulk_calls.wants(address, frames):
            try:
                frames = self._bulk_calls.spill(frames, fut, oneway, self.config.shm_hold_s)
            except Exception as exc:  # no bulk endpoint (the node is stopping)
                fut.set_exception(PeerUnavailableError(
                    f"cannot call {actor}.{method}: {exc}", actor=actor, method=method,
                    address=address))
                return fut
        if self._stopped:
            fut.set_exception(PeerUnavailableError(
                f"cannot call {actor}.{method}: this node is stopped",
                actor=actor, method=method, address=address))
            return fut
        if threading.get_ident() == self._loop_thread_id:
            self._send_call(address, call_id, fut, frames, timeout_s, oneway)
        elif oneway or not wakers.this_thread().follows(outer):
            self._post(self._send_call, address, call_id, fut, frames, timeout_s, oneway)
        elif not self._send_direct(address, call_id, fut, frames, timeout_s):
            self._post(self._send_call, address, call_id, fut, frames, timeout_s, oneway,
                       idle=True)
        return outer

    def _send_direct(self, address: str, call_id: int, fut: ActorFuture, frames: list,
                     timeout_s: float) -> bool:
        """(A 1:1 caller's thread) Send the call on its peer's DEALER from this thread, as
        the loop would, instead of handing it to the loop and waking it: on this 2-core
        machine that hand-off was 15 us of a 175 us sync call (bench/RESULTS.md). Only
        when the loop has run everything posted so far (a cast this thread posted before
        goes out first) and the peer is connected already; False: post it instead."""
        if self._outbox or self._flushing or address == self.address:
            return False
        peer = self._peers.get(address)
        if peer is None:
            return False
        with peer.lock:
            if peer.closed:
                return False
            now = self.now()
            peer.track(call_id, fut, now)
            try:
                _send_frames(peer.dealer, frames)
            except zmq.Again:  # its queue is full: the loop's send says so
                peer.pending.pop(call_id, None)
                return False
            more = _waiting(peer.dealer)  # the send may have taken the FD's notice of it
        self._deadlines.push_any_thread(now + timeout_s, call_id, peer)
        self.stats.calls_sent += 1
        if more:
            self._post(self.drain_peer, peer, True, idle=True)
        return True

    def call_many(self, targets: list[tuple[str, str]], method: str, args: tuple = (),
                  kwargs: dict | None = None, *,
                  timeout_s: float | None = None) -> list[ActorFuture]:
        """The same call to each (address, actor key); one future each. Big buffers bound for
        this host are copied into shared memory once for all of them, not once per target."""
        timeout_s = self.config.default_timeout_s if timeout_s is None else timeout_s
        futs, segment, shared = [], None, []
        receivers: dict[shm.Segment, list[ActorFuture]] = {}  # slot i = i-th future
        for address, key in targets:
            if not self._shares_with(address):
                futs.append(self.call(address, key, method, args, kwargs, timeout_s=timeout_s))
                continue
            outer = self._future(key, method, address)
            futs.append(outer)
            call_id = next(self._call_ids)
            try:
                frames = messages.encode_call(call_id, key, method, int(timeout_s * 1000),
                                              args, kwargs or {})
            except Exception as exc:
                outer.set_exception(TypeError(f"arguments of {key}.{method} cannot be sent: "
                                              f"{exc}"))
                continue
            slot = len(receivers.get(segment, ())) if segment is not None else 0
            plain, (frames, used) = frames, self._pool.spill(frames, self._shm_min, segment,
                                                             slot)
            fut = self._unless_foreign(call_id, outer, plain, timeout_s) if used else outer
            if used is not None:  # a new segment (slot 0) only if the buffers differ
                segment = used
                receivers.setdefault(used, []).append(fut)
            shared.append((call_id, fut, frames))
        for used, holders in receivers.items():
            self._pool.sent(used, len(holders), len(holders), self.now() + timeout_s)
            for fut in holders:
                fut.add_done_callback(lambda _, used=used: self._pool.answered(used))
        for call_id, fut, frames in shared:
            if self._stopped:
                fut.set_exception(PeerUnavailableError(
                    f"cannot call {fut.actor}.{method}: this node is stopped",
                    actor=fut.actor, method=method, address=fut.address))
            else:
                self.call_in_loop(self._send_call, fut.address, call_id, fut, frames,
                                  timeout_s, False)
        return futs

    def _future(self, actor: str, method: str, address: str) -> ActorFuture:
        return ActorFuture(actor, method, address, self._loop_thread_id, self.defer_wakes)

    def defer_wakes(self, due: list) -> None:
        """(Loop thread) Wake these Wakers when this pass of the loop ends: a thread woken in
        the middle of a drain takes the GIL and holds the rest of the drain up."""
        self._wakes_due.extend(due)
        self._schedule_drain()

    def _post(self, fn: Callable, *args: Any, idle: bool = False) -> None:
        """Run fn(*args) on the loop. `idle`: the posting thread sleeps right after, so wake
        the loop without the GIL (wakers.py says why); otherwise wake it holding the GIL, and
        the poster goes on adding to the same batch (a caller sending many calls)."""
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
        """Run fn(*args) on the loop thread (soon, or now when already on it)."""
        if threading.get_ident() == self._loop_thread_id:
            fn(*args)
        else:
            self._post(fn, *args)

    def post_reply(self, rid: bytes, frames: list, idle: bool = False) -> None:
        """Send a reply from another thread (a big one is copied to shared memory here, off
        the loop). `idle`: that thread has nothing else queued (see _post)."""
        if len(frames) > 1 and self._shm_replies and type(rid) is bytes \
                and shm_scope.shares_with_caller(rid):
            frames = self._spill_reply(frames)
        elif len(frames) > 1 and type(rid) is bytes and self._bulk_calls.wants_reply(frames):
            frames = self._bulk_calls.spill_reply(frames, self.config.shm_hold_s)
        if not (idle and type(rid) is bytes and self._reply_direct(rid, frames)):
            self._post(self.send_reply, rid, frames, True, idle=idle)

    def _reply_direct(self, rid: bytes, frames: list) -> bool:
        """(An actor thread with nothing queued) Send the reply on the ROUTER from this
        thread instead of waking the loop to send it (13 us of a 175 us sync call, see
        _send_direct); False once the ROUTER is closed."""
        router = self._router
        if router is None:
            return False
        with self._router_lock:
            if router.closed:
                return False
            try:
                _send_frames(router, frames, rid)
            except (zmq.Again, zmq.ZMQError):  # as send_reply: the caller will time out
                self.stats.replies_dropped += 1
            more = _waiting(router)  # the send may have taken the FD's notice of a call
        if more:
            self._post(self._drain_router, True, idle=True)
        return True

    # ------------------------------------------------------------ shared memory

    def _shares_with(self, address: str) -> bool:
        """Send big frames to `address` through shared memory? Same host, and not a peer
        that refused ours (another PID namespace: see shm_scope.can_share)."""
        return bool(self._shm_min) and address != self.address and shm_scope.same_host(address) \
            and address not in self._foreign

    def _unless_foreign(self, call_id: int, outer: ActorFuture, plain: list,
                        timeout_s: float) -> ActorFuture:
        """The future to send a call through shared memory with: its outcome goes to `outer`,
        unless the callee refused the segment as from another PID namespace; then the call
        (not run: refused while decoding) goes again through the socket, and so will every
        later one to that address."""
        first = self._future(outer.actor, outer.method, outer.address)

        def done(_: ActorFuture) -> None:
            error = first.exception()
            if isinstance(error, ProtocolError) and shm_scope.FOREIGN in str(error):
                self._foreign.add(outer.address)
                self.call_in_loop(self._send_call, outer.address, call_id, outer, plain,
                                  timeout_s, False)
            elif error is not None:
                outer.set_exception(error)
            else:
                outer.set_result(first.result())

        first.add_done_callback(done)
        return first

    def _spill_reply(self, frames: list) -> list:
        frames, segment = self._pool.spill(frames, self._shm_min)
        if segment is not None:
            self._pool.sent(segment, 1, 0, self.now() + self.config.shm_hold_s)
        return frames
