"""Sending and reading one ZeroMQ message at the floor of pyzmq's costs, and draining a socket.

Not who owns the sockets nor when they are read (node_loop.py); these only spare the
Python that pyzmq's convenience wrappers add per frame (figures in bench/call_costs.py).
"""

from __future__ import annotations

from collections.abc import Callable

import zmq

from iris.wire.messages import MAX_BUFFER_FRAMES

# Plain ints, not the flag enums: pyzmq's send_multipart/recv_multipart wrappers combine
# enum flags and query RCVMORE per frame, which cost 2.5-3.6 us a message against 1.2-1.3
# us for these loops (measured here on a 2-frame message).
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)


_zget = zmq.backend.Socket.get
_EVENTS = zmq.EVENTS
_POLLIN = int(zmq.POLLIN)


def waiting(sock: zmq.Socket) -> bool:
    """Is a message waiting on `sock`? (ZMQ_EVENTS; False once the socket is closed.)"""
    try:
        return bool(_zget(sock, _EVENTS) & _POLLIN)
    except zmq.ZMQError:
        return False


def messages(sock: zmq.Socket, ask_first: bool, after_first: Callable[[], None],
             read: Callable[[zmq.Socket], tuple]):
    """Every message waiting on `sock`, each as `read(sock)` returns it (recv_routed,
    recv_reply). "Anything waiting?" costs less asked with ZMQ_EVENTS than by a recv that
    fails (pyzmq builds and raises an Again each time; bench/call_costs.py), so it is asked
    that way before the first recv when nothing may be there (`ask_first`: a check after our
    own sends), and after the first message (one a wake-up is the 1:1 call's case), once
    `after_first()` has run (it wakes the thread the message was for, which gets going while
    we look for more). A burst is then read until Again."""
    if ask_first and not waiting(sock):
        return
    first = True
    while True:
        try:
            message = read(sock)
        except zmq.Again:
            return
        yield message
        if first:
            first = False
            after_first()
            if not waiting(sock):
                return


# The first frames of a message (a ROUTER's routing id, a header) are small and wanted as
# bytes: received as bytes, not as a Frame whose bytes are then copied out, and "more?"
# asked once with ZMQ_RCVMORE: 2.2-3.5 us a 2-frame report against 2.7-4.3 us as Frames
# (bench/RESULTS.md, "Reports and calls: the node's own floor per report"). Frames after
# the header (buffers, possibly big) stay zero-copy Frames.
_zrecv = zmq.backend.Socket.recv
_RCVMORE = zmq.RCVMORE


def recv_routed(sock: zmq.Socket) -> tuple[bytes, bytes, list]:
    """(routing id, header, the further frames) of one message on a ROUTER (which always
    puts the routing id before at least one frame); raises zmq.Again when none waits."""
    rid = _zrecv(sock, _NOBLOCK, True)
    header = _zrecv(sock, _NOBLOCK, True)
    return rid, header, _rest(sock) if _zget(sock, _RCVMORE) else []


def recv_reply(sock: zmq.Socket) -> tuple[bytes, list]:
    """(header, the further frames) of one message on a DEALER; raises zmq.Again."""
    header = _zrecv(sock, _NOBLOCK, True)
    return header, _rest(sock) if _zget(sock, _RCVMORE) else []


# A message may carry at most this many frames after its header (messages.MAX_BUFFER_FRAMES,
# and a table frame for shared memory or the bulk path); one more is kept so that decoding
# refuses it, and the rest are read and dropped. Kept, a peer's one message of a million
# empty frames (2 MB sent) held 250 MB here as Frame objects.
MAX_KEPT_FRAMES = MAX_BUFFER_FRAMES + 2


def _rest(sock: zmq.Socket) -> list:
    rest = []
    while True:
        frame = _zrecv(sock, _NOBLOCK, False)
        if len(rest) < MAX_KEPT_FRAMES:
            rest.append(frame)
        if not frame.more:
            return rest


# Frames below this are copied into the ZeroMQ message: cheaper than the zero-copy hand-off
# (a Frame object and a release callback) up to about pyzmq's own copy_threshold of 64 KiB.
_COPY_BELOW = 64 * 1024
# pyzmq's Socket.send is a Python wrapper (for DRAFT sockets' routing_id and group keywords)
# around its backend's, called with keywords: the backend's own, called positionally, costs
# 0.25 us a frame against 0.42 us (bench/call_costs.py).
_zsend = zmq.backend.Socket.send


def send_frames(sock: zmq.Socket, frames: list, first: bytes | None = None) -> None:
    """Send one message, `first` (a routing id) before `frames` if given; small bytes are
    copied, big frames are not."""
    if first is not None:
        _zsend(sock, first, _NOBLOCK | _SNDMORE, True)  # may raise: nothing sent then
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        _zsend(sock, frame, _NOBLOCK | _SNDMORE if i < last else _NOBLOCK,
               type(frame) is bytes and len(frame) < _COPY_BELOW)
