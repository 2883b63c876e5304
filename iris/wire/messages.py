"""The Iris wire protocol, version 1: every message kind, declared once, encoded and validated here.

Only this module knows the header layout. The full spec (frames, kinds, errors, liveness) is
docs/protocol.md. In short, a message is one msgpack header frame plus zero or more
buffer frames; the ROUTER side sees a routing-id frame first.

    CALL   [1, CALL,  call_id, actor, method, timeout_ms, fmt, payload(, auth)]  reply expected
    CAST   [1, CAST,  0,       actor, method, timeout_ms, fmt, payload(, auth)]  no reply
    REPLY  [1, REPLY, call_id, fmt, payload]
    ERROR  [1, ERROR, call_id, code, message, detail]
    PING   [1, PING,  nonce]
    PONG   [1, PONG,  nonce]

For CALL/CAST the payload is [args, kwargs]; the optional `auth` (bin) is a cluster token that
gives the caller a control-plane role at the receiver (see docs/protocol.md, Roles). fmt is codec.FORMAT_MSGPACK (payload inline)
or codec.FORMAT_PICKLE (payload is pickle bytes).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

import msgpack

from iris.base.errors import ProtocolError
from iris.wire import codec

VERSION = 1

CALL, CAST, REPLY, ERROR, PING, PONG = 1, 2, 3, 4, 5, 6
KIND_NAMES = {CALL: "CALL", CAST: "CAST", REPLY: "REPLY", ERROR: "ERROR", PING: "PING", PONG: "PONG"}

# A message may carry at most this many buffer frames; more is treated as malformed so a
# hostile peer cannot make us hold an unbounded frame list.
MAX_BUFFER_FRAMES = 1024

# Error codes carried by ERROR messages.
E_APP = "app"  # the method raised
E_ACTOR_NOT_FOUND = "actor_not_found"
E_METHOD_NOT_FOUND = "method_not_found"
E_BAD_ARGUMENTS = "bad_arguments"
E_DEADLINE = "deadline_exceeded"
E_ACTOR_DIED = "actor_died"
E_PROTOCOL = "protocol"
E_PERMISSION = "permission_denied"  # the method needs a role the caller does not hold
ERROR_CODES = frozenset(
    {E_APP, E_ACTOR_NOT_FOUND, E_METHOD_NOT_FOUND, E_BAD_ARGUMENTS, E_DEADLINE, E_ACTOR_DIED,
     E_PROTOCOL, E_PERMISSION}
)
# Longest accepted auth token: tokens are 32 random bytes; more is malformed.
MAX_AUTH = 256


@dataclass(slots=True)
class Call:
    call_id: int
    actor: str
    method: str
    timeout_ms: int
    fmt: int
    payload: Any
    buffers: list
    oneway: bool
    auth: bytes | None = None
    role: str = "client"  # set by the receiving node from auth (or "internal" in process)
    principal: str | None = None  # who the credential names (a worker's id), if anyone


# ---------------------------------------------------------------- encoding


def encode_call(call_id: int, actor: str, method: str, timeout_ms: int, args: tuple,
                kwargs: dict, oneway: bool = False, auth: bytes | None = None) -> list:
    """Frames for a CALL (or CAST when oneway). Tries inline msgpack, falls back to pickle."""
    kind = CAST if oneway else CALL
    extra = [auth] if auth else []
    buffers: list = []
    try:
        body = codec.lift_call_buffers(args, kwargs, buffers)
        head = [VERSION, kind, call_id, actor, method, timeout_ms, codec.FORMAT_MSGPACK, body,
                *extra]
        header = codec.packb(head, buffers)
        if (len(header) >= codec.DEEP_LIFT_MIN_BYTES and codec.may_hold_big_bytes(header)
                and codec.has_nested_big_bytes(body)):
            buffers = []
            head[7] = codec.deep_lift(body, buffers)
            header = codec.packb(head, buffers)
    except (TypeError, ValueError, OverflowError):
        buffers = []
        pickled = codec.pickle_value((args, kwargs), buffers)
        header = codec.packb([VERSION, kind, call_id, actor, method, timeout_ms,
                              codec.FORMAT_PICKLE, pickled, *extra])
    return [header, *buffers] if buffers else [header]


def encode_reply(call_id: int, value: Any) -> list:
    buffers: list = []
    try:
        head = [VERSION, REPLY, call_id, codec.FORMAT_MSGPACK,
                codec.lift_value_buffers(value, buffers)]
        header = codec.packb(head, buffers)
        if (len(header) >= codec.DEEP_LIFT_MIN_BYTES and codec.may_hold_big_bytes(header)
                and codec.has_nested_big_bytes(value)):
            buffers = []
            head[4] = codec.deep_lift(value, buffers)
            header = codec.packb(head, buffers)
    except (TypeError, ValueError, OverflowError):
        buffers = []
        header = codec.packb([VERSION, REPLY, call_id, codec.FORMAT_PICKLE,
                              codec.pickle_value(value, buffers)])
    return [header, *buffers] if buffers else [header]


def encode_error(call_id: int, code: str, message: str, exc: BaseException | None = None) -> list:
    """An ERROR; for E_APP the exception travels pickled (when it pickles) with its traceback."""
    detail: dict[str, Any] = {}
    if exc is not None:
        detail["type"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
        detail["traceback"] = "".join(traceback.format_exception(exc))
        try:
            detail["pickled"] = codec.pickle_value(exc, [])  # no out-of-band: keep it one frame
        except Exception:  # an exception holding an unpicklable object: send its text only
            pass
    return [codec.packb([VERSION, ERROR, call_id, code, message, detail])]


def encode_ping(nonce: int) -> list:
    return [codec.packb([VERSION, PING, nonce])]


def encode_pong(nonce: int) -> list:
    return [codec.packb([VERSION, PONG, nonce])]


# ---------------------------------------------------------------- decoding


def decode(header: bytes, buffers: list) -> list:
    """Validated header fields (a list starting with version and kind). Raises ProtocolError."""
    if len(buffers) > MAX_BUFFER_FRAMES:
        raise ProtocolError(f"{len(buffers)} buffer frames (at most {MAX_BUFFER_FRAMES})")
    try:
        msg = codec.unpackb(header, buffers)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"undecodable header: {type(exc).__name__}: {exc}") from exc
    if type(msg) is list and _plain_call_or_reply(msg):
        return msg
    if type(msg) is not list or len(msg) < 3:
        raise ProtocolError(f"header must be a list of >= 3 items, got {type(msg).__name__}")
    if msg[0] != VERSION:
        raise ProtocolError(f"protocol version {msg[0]!r} not supported (this node speaks {VERSION})")
    kind = msg[1]
    shape = _SHAPES.get(kind) if type(kind) is int else None
    if shape is None:
        raise ProtocolError(f"unknown message kind {kind!r}")
    if kind in (CALL, CAST) and len(msg) == len(shape) + 3:  # with an auth token
        if type(msg[-1]) is not bytes or not 0 < len(msg[-1]) <= MAX_AUTH:
            raise ProtocolError(f"{KIND_NAMES[kind]} auth must be 1-{MAX_AUTH} bytes")
    elif len(msg) != len(shape) + 2:
        raise ProtocolError(f"{KIND_NAMES[kind]} needs {len(shape) + 2} fields, got {len(msg)}")
    for i, expected in enumerate(shape):
        if expected is not None and type(msg[i + 2]) is not expected:
            raise ProtocolError(
                f"{KIND_NAMES[kind]} field {i + 2} must be {expected.__name__}, "
                f"got {type(msg[i + 2]).__name__}"
            )
    if kind in (CALL, CAST) and msg[6] not in (codec.FORMAT_MSGPACK, codec.FORMAT_PICKLE):
        raise ProtocolError(f"unknown payload format {msg[6]!r}")
    if kind == REPLY and msg[3] not in (codec.FORMAT_MSGPACK, codec.FORMAT_PICKLE):
        raise ProtocolError(f"unknown payload format {msg[3]!r}")
    return msg


def _plain_call_or_reply(msg: list) -> bool:
    """The checks below, unrolled for the two kinds of nearly every message: a CALL (with or
    without an auth token: a worker's report has one) and a REPLY; every other header takes
    the general path."""
    n, kind = len(msg), msg[1] if len(msg) > 1 else None
    if type(kind) is not int or msg[0] != VERSION or type(msg[0]) is bool:
        return False
    if kind == CALL and (n == 8 or n == 9 and type(msg[8]) is bytes
                         and 0 < len(msg[8]) <= MAX_AUTH):
        return (type(msg[2]) is int and type(msg[3]) is str and type(msg[4]) is str
                and type(msg[5]) is int and type(msg[6]) is int
                and (msg[6] == codec.FORMAT_MSGPACK or msg[6] == codec.FORMAT_PICKLE))
    if kind == REPLY and n == 5:
        return (type(msg[2]) is int and type(msg[3]) is int
                and (msg[3] == codec.FORMAT_MSGPACK or msg[3] == codec.FORMAT_PICKLE))
    return False


def peek_call(header: bytes) -> tuple[int, int] | None:
    """(kind, call_id) of a header whose buffers could not be had, or None if unreadable: so
    the call can still be answered (or its caller told) instead of waiting for its deadline."""
    try:
        unpacker = msgpack.Unpacker(raw=False, ext_hook=lambda code, data: None)
        unpacker.feed(header)
        if unpacker.read_array_header() < 3 or unpacker.unpack() != VERSION:
            return None
        kind, call_id = unpacker.unpack(), unpacker.unpack()
    except Exception:
        return None
    return (kind, call_id) if type(kind) is int and type(call_id) is int else None


def peek_route(header: bytes) -> Call | None:
    """A CALL or CAST read from its header alone (its buffers not here yet: a bulk table
    names them), buffer markers in its payload read as None; None if it is not one. What
    the receiver may decide before it fetches anything: is there such an actor and method,
    may this caller call it."""
    try:
        msg = msgpack.unpackb(header, raw=False, ext_hook=lambda code, data: None)
    except Exception:
        return None
    if type(msg) is not list or len(msg) not in (8, 9) or msg[1] not in (CALL, CAST):
        return None
    auth = msg[8] if len(msg) == 9 else None
    if not all(type(msg[i]) is t for i, t in ((2, int), (3, str), (4, str), (5, int), (6, int))) \
            or (auth is not None and (type(auth) is not bytes or not 0 < len(auth) <= MAX_AUTH)):
        return None
    return call_from(msg, [])


def peek_target(header: bytes) -> tuple[int, int, str, bytes | None] | None:
    """(kind, call_id, actor, auth) of a CALL or CAST, its payload skipped, not built: what
    a receiver may check before it decodes a big header. None if it is not one."""
    try:
        unpacker = msgpack.Unpacker(raw=False, ext_hook=lambda code, data: None,
                                    max_buffer_size=len(header))
        unpacker.feed(header)
        size = unpacker.read_array_header()
        if size not in (8, 9) or unpacker.unpack() != VERSION:
            return None
        kind, call_id, actor = unpacker.unpack(), unpacker.unpack(), unpacker.unpack()
        for _ in range(4):  # method, timeout_ms, fmt, payload
            unpacker.skip()
        auth = unpacker.unpack() if size == 9 else None
    except Exception:
        return None
    if kind not in (CALL, CAST) or type(call_id) is not int or type(actor) is not str:
        return None
    return kind, call_id, actor, auth if type(auth) is bytes else None


# Field types after [version, kind]; None means any msgpack value.
_SHAPES: dict[int, tuple] = {
    CALL: (int, str, str, int, int, None),
    CAST: (int, str, str, int, int, None),
    REPLY: (int, int, None),
    ERROR: (int, str, str, dict),
    PING: (int,),
    PONG: (int,),
}


def call_from(msg: list, buffers: list) -> Call:
    return Call(msg[2], msg[3], msg[4], msg[5], msg[6], msg[7], buffers, msg[1] == CAST,
                msg[8] if len(msg) > 8 else None)


def decode_payload(fmt: int, payload: Any, buffers: list) -> Any:
    """The value of a REPLY or the (args, kwargs) of a CALL (unpickled if needed)."""
    if fmt == codec.FORMAT_PICKLE:
        return codec.unpickle_value(payload, buffers)
    return payload


def call_arguments(call: Call) -> tuple[tuple, dict]:
    """(args, kwargs) of a call, validated. Raises ProtocolError on a wrong shape."""
    try:
        value = decode_payload(call.fmt, call.payload, call.buffers)
    except ProtocolError:
        raise
    except Exception as exc:  # a corrupt pickle raises any of a dozen types
        raise ProtocolError(f"call payload cannot be decoded: {type(exc).__name__}: {exc}") \
            from exc
    if (type(value) not in (list, tuple) or len(value) != 2
            or type(value[0]) not in (list, tuple) or type(value[1]) is not dict):
        raise ProtocolError("call payload must be [args, kwargs]")
    kwargs = value[1]
    if kwargs and any(type(k) is not str for k in kwargs):
        raise ProtocolError("keyword argument names must be strings")
    return tuple(value[0]), kwargs
