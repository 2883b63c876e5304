"""Sending and reading one ZeroMQ message at the floor of pyzmq's costs, and draining a socket.

Not who owns the sockets nor when they are read (node_loop.py); these only spare the
Python that pyzmq's convenience wrappers add per frame (figures in bench/call_costs.py).
"""

from __future__ import annotations

from collections.abc import Callable

import zmq

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


def messages(sock: zmq.Socket, ask_first: bool, after_first: Callable[[], None]):
    """Every message waiting on `sock`, as frames. "Anything waiting?" costs less asked with ZMQ_EVENTS than by a recv that fails (pyzmq builds and
    raises an Again each time; bench/call_costs.py), so it is asked that way before the
    first recv when nothing may be there (`ask_first`: a check after our own sends), and
    after the first message (one a wake-up is the 1:1 call's case), once `after_first()` has
    run (it wakes the thread the message was for, which gets going while we look for more).
    A burst is then read until Again."""
    if ask_first and not waiting(sock):
        return
    first = True
    while True:
        try:
            frames = recv_frames(sock)
        except zmq.Again:
            return
        yield frames
        if first:
            first = False
            after_first()
            if not waiting(sock):
                return


def recv_frames(sock: zmq.Socket) -> list:
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


def send_frames(sock: zmq.Socket, frames: list, first: bytes | None = None) -> None:
    """Send one message, `first` (a routing id) before `frames` if given; small bytes are
    copied, big frames are not."""
    if first is not None:
        _zsend(sock, first, _NOBLOCK | _SNDMORE, True)  # may raise: nothing sent then
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        _zsend(sock, frame, _NOBLOCK | _SNDMORE if i < last else _NOBLOCK,
               type(frame) is bytes and len(frame) < _COPY_BELOW)
