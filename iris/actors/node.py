"""Node: this process's endpoint — its lifecycle, the actors it hosts, calls from any thread,
and what an arriving request means (decoded, its role found, handed to its actor).

Not the sockets, pending calls and passes of the event loop (node_loop.py: the node owns one
NodeLoop, `self.io`, runs it on its own thread, and is its `Inbound`), nor actor semantics
(hosting.py) nor liveness policy (peers.py). Big payloads are placed here, before the loop
sends them: shared memory for this host, the bulk path for others.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import zmq

from iris.actors import bulk_calls, ports, shm, shm_scope, wakers
from iris.actors.actor_spec import spec_of
from iris.actors.admission import MAX_CONTROL_HEADER_BYTES, Gate
from iris.actors.bulk import Bulk
from iris.actors.bulk_calls import BulkCalls
from iris.actors.config import NodeConfig
from iris.actors.future import ActorFuture
from iris.actors.hosting import HostedActor
from iris.actors.node_loop import NodeLoop
from iris.actors.peers import LocalReturn, Peer
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


class Node:
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
        self.io = NodeLoop(self.id, self.config, self.stats, self.now, self.new_socket, self)
        # Read by many (hosting, bulk, timers): the loop's own objects, not copies.
        self.loop = self.io.loop
        self.defer_wakes = self.io.defer_wakes
        self.call_in_loop = self.io.call_in_loop
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"iris-{self.id}")
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._actors: dict[str, HostedActor] = {}
        self._call_ids = itertools.count(1)
        self._stopped = False
        # auth token -> (the role its calls hold here, whom it names: a worker's id or None)
        self._grants: dict[bytes, tuple[str, str | None]] = {}
        self._gate = Gate(self._actors, self._grants, self.send_reply, self.stats)
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
        self.loop.call_soon_threadsafe(self._in_loop_then_set, self.io.fail_pending, failed)
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

    @staticmethod
    def _in_loop_then_set(fn: Callable[[], Any], done: threading.Event) -> None:
        try:
            fn()
        finally:
            done.set()

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._auth = self.security.start_authenticator(self._ctx) if self.security else None
            router = self._bind_router()
        except BaseException as exc:
            if isinstance(exc, zmq.ZMQError) and exc.errno == errno.EADDRINUSE:
                # One line naming who holds it, not a ZMQError traceback (issue 27).
                exc = ConflictError(ports.in_use(self.config.bind))
            self._start_error = exc
            self._ready.set()
            return
        self._shm_replies = bool(self._shm_min) and shm_scope.same_host(self.address)
        self.io.run(router, self.address, self._ready.set)

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
            self.io.close_sockets()
            self.bulk.close()
            self._pool.close()
        finally:
            self.io.stop()  # wakes the threads waiting on the calls failed above
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
        return self.io.in_loop_thread()

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

    def let_go(self, idle_s: float, address: str | None = None) -> None:
        """Close the connection to `address` (to every peer, if None) if it is idle: nothing
        owed, nothing heard for `idle_s` (NodeLoop.let_go; any thread, done on the loop). A
        worker reporting through a report front lets go of the controller's."""
        self.call_in_loop(self.io.let_go, idle_s, address)

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
        io = self.io
        if threading.get_ident() == io.thread_id:
            io.send_call(address, call_id, fut, frames, timeout_s, oneway)
        else:  # `idle`: a thread that waits for each answer (Waker.follows) sleeps next
            io.post(io.send_call, address, call_id, fut, frames, timeout_s, oneway,
                    idle=not oneway and wakers.this_thread().follows(outer))
        return outer

    def peer_lost(self, address: str) -> bool:
        """(Any thread) Did the connection to `address` go down with nothing heard since?
        A read of the loop's state, not a question sent anywhere: may be a moment late."""
        peer = self.io.peers.get(address)
        return peer is not None and peer.lost

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
                self.call_in_loop(self.io.send_call, fut.address, call_id, fut, frames,
                                  timeout_s, False)
        return futs

    def _future(self, actor: str, method: str, address: str) -> ActorFuture:
        return ActorFuture(actor, method, address, self.io.thread_id, self.defer_wakes)

    def post_reply(self, rid: bytes, frames: list, idle: bool = False) -> None:
        """Send a reply from another thread (a big one is placed here, off the loop).
        `idle`: that thread has nothing else queued (NodeLoop.post)."""
        if len(frames) > 1 and type(rid) is bytes:
            frames = self._place_reply(rid, frames)
        io = self.io
        io.post(io.send_reply, rid, frames, idle=idle)

    def send_reply(self, rid: bytes | LocalReturn, frames: list) -> None:
        """(Loop thread) Send a reply; a big one goes by shared memory or the bulk path."""
        if len(frames) > 1 and type(rid) is bytes:
            frames = self._place_reply(rid, frames)
        self.io.send_reply(rid, frames)

    def _place_reply(self, rid: bytes, frames: list) -> list:
        """A reply's frames, its big buffers in shared memory for a caller on this host or
        offered on the bulk path to one on another."""
        if self._shm_replies and shm_scope.shares_with_caller(rid):
            return self._spill_reply(frames)
        if self._bulk_calls.wants_reply(frames):
            return self._bulk_calls.spill_reply(frames, self.config.shm_hold_s)
        return frames

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
                self.call_in_loop(self.io.send_call, outer.address, call_id, outer, plain,
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

    # ------------------------------------------------------------ Inbound (node_loop.py)

    def serves(self, actor: str) -> bool:
        return actor in self._actors

    def on_bulk_reply(self, peer: Peer, header: bytes, buffers: list) -> None:
        self._bulk_calls.receive_reply(peer, header, buffers)

    def on_sweep(self, now: float) -> None:
        if self._pool.busy():
            self._pool.sweep(now)

    def on_request(self, rid: bytes | LocalReturn, header: bytes, buffers: list,
                   role: str | None = None) -> None:
        """(Loop thread) One CALL, CAST or PING: `rid` is who sent it (a ROUTER routing id,
        or LocalReturn for an in-process call, whose `role` is INTERNAL)."""
        if self._bulk_calls.holding and self._bulk_calls.hold(rid, header, buffers, role):
            return  # behind a call of the same caller whose frames are being fetched
        if len(header) > MAX_CONTROL_HEADER_BYTES and role is None and \
                self._gate.refused_undecoded(rid, header):
            return
        try:
            if buffers:
                if bulk_calls.is_table(buffers[-1]):  # big frames on the bulk path: fetch
                    if not self._gate.refused_unfetched(rid, header, role, self.address):
                        self._bulk_calls.receive(rid, header, buffers, role)
                    return
                if shm.is_table(buffers[-1]) and \
                        self._gate.refused_unfetched(rid, header, role, self.address):
                    return  # a segment of another process is not opened for it
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
            call = self._gate.with_role(messages.call_from(msg, buffers), role)
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
