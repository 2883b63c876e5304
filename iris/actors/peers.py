"""Outgoing connections: one DEALER per peer address, its pending calls (completed by its
replies), and its liveness.

Not the loop or the ROUTER (node_loop.py). Everything here runs on the node's loop thread.

Liveness, Paranoid-Pirate style: any message from a peer refreshes it. A peer that owes us
replies and has been silent for `heartbeat_interval_s` gets a PING; silent for
`peer_dead_after_s` it is declared dead: its pending calls fail with PeerUnavailableError and
its socket is closed (the next call connects afresh). A DISCONNECTED event from the socket
monitor fails pending calls at once: libzmq drops messages queued in a torn-down pipe, so
a call in flight at that moment may be lost, and the caller must hear about it. Silence is
counted only while this node could listen: after its own loop stood still, every waited-on
peer's silence starts again (restart_silence).
"""

from __future__ import annotations

import heapq
import logging
from typing import TYPE_CHECKING

import zmq
from zmq.utils.monitor import parse_monitor_message

from iris.actors import bulk_calls, shm, shm_scope
from iris.actors.keys import WORKER_KEY_PREFIX
from iris.base.errors import PeerUnavailableError, ProtocolError
from iris.wire import codec, messages, remote_errors

if TYPE_CHECKING:
    from iris.actors.future import ActorFuture
    from iris.actors.node_loop import NodeLoop

_log = logging.getLogger(__name__)

_MONITORED = (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
              | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
              | zmq.EVENT_HANDSHAKE_SUCCEEDED)


class Peer:
    """One remote node we call. `pending` maps call id -> (future, actor, method)."""

    __slots__ = ("address", "dealer", "monitor", "pending", "last_heard", "ping_sent", "lost",
                 "refused", "_io")

    def __init__(self, io: NodeLoop, address: str):
        self._io = io
        self.address = address
        self.pending: dict[int, ActorFuture] = {}
        self.last_heard = 0.0
        self.ping_sent = False
        # The connection went down (DISCONNECTED) and nothing was heard since: a call sent
        # now waits for a reconnect that, if the peer's process is gone, never comes.
        self.lost = False
        # Why its last handshake failed, until it is heard from: a DEALER with no connection
        # refuses a send at once (zmq.Again), and that is the reason to give, not a full queue.
        self.refused: str | None = None
        self.dealer = io.new_socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.ROUTING_ID, shm_scope.routing_id())  # says our PID namespace
        self.dealer.connect(address)
        self.monitor = self.dealer.get_monitor_socket(_MONITORED)
        loop = io.loop
        loop.add_reader(self.dealer.getsockopt(zmq.FD), io.on_peer_readable, self)
        loop.add_reader(self.monitor.getsockopt(zmq.FD), self._on_monitor)
        # ZMQ_FD is edge-triggered and is only re-armed by reading the socket's events:
        # without one read now, the first DISCONNECTED would never wake the loop.
        loop.call_soon(self._on_monitor)

    def track(self, call_id: int, fut: ActorFuture, now: float) -> None:
        if not self.pending:
            self.last_heard = now  # the silence clock starts when we start waiting
            self.ping_sent = False
        fut.sent_at = now
        self.pending[call_id] = fut

    def heard(self, now: float) -> None:
        self.last_heard = now
        self.ping_sent = False
        self.lost = False
        self.refused = None

    def restart_silence(self, now: float) -> None:
        """This node stood still (NodeLoop._note_stall): the silence of a peer that owes us
        replies counts from now. One owed nothing keeps when it was last heard (let_go)."""
        if self.pending:
            self.heard(now)

    def on_reply(self, header: bytes, buffers: list, now: float) -> None:
        """A REPLY, ERROR or PONG from this peer (loop thread): complete the call's future."""
        io = self._io
        try:
            if buffers:
                if bulk_calls.is_table(buffers[-1]):  # big frames on the bulk path: fetch
                    return io.on_bulk_reply(self, header, buffers)
                buffers = shm.resolve(buffers)
            msg = messages.decode(header, buffers)
        except ProtocolError as exc:
            io.stats.malformed += 1
            peek = messages.peek_call(header) if buffers else None
            fut = self.pending.pop(peek[1], None) if peek else None
            if fut is not None:  # its buffers are gone (shared memory of a dead sender)
                fut.set_exception(ProtocolError(f"reply of {fut.actor}.{fut.method} from "
                                                f"{self.address} cannot be read: {exc}"))
            _log.debug("node %s dropped a malformed reply from %s: %s", io.id, self.address, exc)
            return
        kind = msg[1]
        if kind == messages.PONG:
            return
        fut = self.pending.pop(msg[2], None) if kind in (messages.REPLY, messages.ERROR) else None
        stats = io.stats
        if fut is None:
            stats.late_replies += 1  # answered after its deadline, or a stray
            return
        stats.call_latency.observe(now - fut.sent_at)
        # A worker's answers are read as plain data only: a pickle is code, and a worker is
        # one host that may be compromised (docs/protocol.md, Roles); the controller, which
        # commands every worker, must not run what one of them sends back.
        plain = fut.actor.startswith(WORKER_KEY_PREFIX)
        if kind == messages.REPLY:
            if plain and msg[3] != codec.FORMAT_MSGPACK:
                stats.calls_error += 1
                fut.set_exception(ProtocolError(
                    f"reply of {fut.actor}.{fut.method} from {self.address} is a pickle: a "
                    "worker's answers are read as plain msgpack only (refused unread)"))
                return
            try:
                value = messages.decode_payload(msg[3], msg[4], buffers)
            except Exception as exc:
                stats.calls_error += 1
                fut.set_exception(ProtocolError(
                    f"reply of {fut.actor}.{fut.method} from {self.address} cannot be "
                    f"decoded here: {exc}"))
                return
            stats.calls_ok += 1
            fut.set_result(value)
        else:
            stats.calls_error += 1
            fut.set_exception(remote_errors.error_from(
                msg[3], msg[4], msg[5], actor=fut.actor, method=fut.method, address=self.address,
                unpickle=not plain))

    def check_liveness(self, now: float, interval_s: float, dead_after_s: float) -> bool:
        """PING if quiet; return False when the peer must be declared dead."""
        if not self.pending:
            return True
        silent = now - self.last_heard
        if silent >= dead_after_s:
            return False
        if silent >= interval_s and not self.ping_sent:
            self.ping_sent = True
            self._io.send_to_peer(self, messages.encode_ping(0))
        return True

    def fail_all(self, reason: str, counted: bool = True) -> None:
        """Fail every pending call; `counted`: as peer_unavailable outcomes (not when the
        node itself is stopping)."""
        pending, self.pending = self.pending, {}
        if counted:
            self._io.stats.calls_peer_unavailable += len(pending)
        for fut in pending.values():
            fut.set_exception(PeerUnavailableError(
                f"call {fut.actor}.{fut.method} to {self.address} failed: {reason}",
                actor=fut.actor, method=fut.method, address=self.address))

    def close(self) -> None:
        loop = self._io.loop
        for sock in (self.dealer, self.monitor):
            try:
                loop.remove_reader(sock.getsockopt(zmq.FD))
            except zmq.ZMQError:
                pass
        self.dealer.disable_monitor()
        self.monitor.close(linger=0)
        self.dealer.close(linger=0)

    def _on_monitor(self) -> None:
        while True:
            try:
                event = parse_monitor_message(self.monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            except zmq.ZMQError:  # socket closed under us during shutdown
                return
            kind = event["event"]
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.refused = None
            elif kind == zmq.EVENT_DISCONNECTED:
                self.lost = True
                # A connection whose handshake failed ends too: that is what to say.
                self.fail_all(self.refused or "the connection was lost (the call may or may "
                              "not have run)")
            else:
                self.refused = (f"the handshake failed ({zmq.Event(kind).name}): wrong or "
                                "missing CURVE keys?")
                self.fail_all(self.refused)


class DeadlineQueue:
    """Pending calls ordered by deadline; lazy deletion (answered calls are skipped).

    Answered calls stay in the heap until their deadline would have passed, which at 50k
    calls/s and a 300 s default timeout would be millions of entries; so the heap is
    compacted to the live calls whenever it doubles past the last compacted size.
    """

    __slots__ = ("_heap", "_compact_at")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Peer]] = []
        self._compact_at = 4096

    def push(self, deadline: float, call_id: int, peer: Peer) -> None:
        heapq.heappush(self._heap, (deadline, call_id, peer))
        if len(self._heap) > self._compact_at:
            self._heap = [e for e in self._heap if e[1] in e[2].pending]
            heapq.heapify(self._heap)
            self._compact_at = max(4096, 2 * len(self._heap))

    def pop_expired(self, now: float) -> list[tuple[int, Peer]]:
        heap, expired = self._heap, []
        while heap and heap[0][0] <= now:
            _, call_id, peer = heapq.heappop(heap)
            if call_id in peer.pending:
                expired.append((call_id, peer))
        return expired


class LocalPeer(Peer):
    """This node itself, as a peer: the pending calls it made to actors it hosts. Those are
    delivered through the actor's mailbox in this process, never over a socket (the
    controller once called its own Region actors and itself over TCP loopback), with the same
    encoding, deadlines and errors as a remote call. Never declared dead: it is us."""

    __slots__ = ()

    def __init__(self, io: NodeLoop):  # no socket: nothing to connect, monitor or close
        self._io = io
        self.address = io.address
        self.pending = {}
        self.last_heard = 0.0
        self.ping_sent = False
        self.lost = False
        self.dealer = self.monitor = None

    def close(self) -> None:
        pass


class LocalReturn:
    """The routing id of an in-process call: its reply goes back to the LocalPeer."""

    __slots__ = ("peer",)

    def __init__(self, peer: LocalPeer):
        self.peer = peer
