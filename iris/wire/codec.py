"""Payload codec: msgpack for plain data, cloudpickle for the rest, big buffers as extra frames.

Not the envelope (see messages.py): this module turns one Python value into
(format, payload, buffers) and back, and nothing else.

- FORMAT_MSGPACK: the value is embedded in the header as msgpack. Only exact plain types
  (None, bool, int, float, str, bytes, list, dict) qualify, so a tuple or a subclass is never
  silently turned into a list or its base type; those go to pickle.
- FORMAT_PICKLE: cloudpickle protocol 5; PickleBuffers (numpy arrays, bytearray) of at
  least OOB_MIN_BYTES travel out of band as extra frames.
- Top-level bytes / bytearray / memoryview arguments of at least OOB_MIN_BYTES are lifted
  out of the msgpack body into extra frames (ExtType markers), so a 64 MB argument is sent
  without a copy. The receiver rebuilds the same type: bytes (one copy, unavoidable),
  bytearray (one copy, it must be writable), memoryview (no copy, read-only view of the frame).
"""

from __future__ import annotations

import importlib
import pickle
import threading
from typing import Any

import cloudpickle
import msgpack

from iris.base.errors import ProtocolError
from iris.wire import copies

FORMAT_MSGPACK = 0
FORMAT_PICKLE = 1

# Below 64 KiB a copy is cheaper than an extra ZeroMQ frame (pyzmq copies small frames anyway:
# its copy_threshold is 64 KiB too).
OOB_MIN_BYTES = 64 * 1024

_EXT_BYTES, _EXT_BYTEARRAY, _EXT_MEMORYVIEW, _EXT_NDARRAY = 1, 2, 3, 4
_BIG_TYPES = {bytes: _EXT_BYTES, bytearray: _EXT_BYTEARRAY, memoryview: _EXT_MEMORYVIEW}
# A msgpack header this big is re-packed with the bytes nested in its lists and dicts lifted
# into frames: one wasted pack of a big message instead of a walk over every small one.
DEEP_LIFT_MIN_BYTES = 1 << 20


def _marker(code: int, value: Any, buffers: list) -> msgpack.ExtType:
    buffers.append(value)
    return msgpack.ExtType(code, (len(buffers) - 1).to_bytes(4, "little"))


def _lift(value: Any, buffers: list) -> Any:
    """Replace a buffer by an ExtType marker pointing at an extra frame.

    bytes go out of band only when big; bytearray and memoryview always do, because msgpack
    would hand them back as bytes and the caller would not get the type it sent.
    """
    code = _BIG_TYPES.get(type(value))
    if code is None or (code == _EXT_BYTES and len(value) < OOB_MIN_BYTES):
        return value
    return _marker(code, value, buffers)


def _deep_lift(value: Any, buffers: list) -> Any:
    """_lift applied through nested lists and dicts (the plain containers msgpack packs)."""
    kind = type(value)
    if kind is list:
        return [_deep_lift(v, buffers) for v in value]
    if kind is dict:
        return {k: _deep_lift(v, buffers) for k, v in value.items()}
    return _lift(value, buffers)


def lift_call_buffers(args: tuple, kwargs: dict, buffers: list) -> list:
    """[args, kwargs] with their top-level big buffers lifted into `buffers`."""
    for arg in args:
        kind = type(arg)
        if kind in _BIG_TYPES and (kind is not bytes or len(arg) >= OOB_MIN_BYTES):
            break
    else:
        if not kwargs:  # the common small call: no comprehension, no per-item checks
            return [list(args), kwargs]
    return [[_lift(a, buffers) for a in args],
            {k: _lift(v, buffers) for k, v in kwargs.items()} if kwargs else kwargs]


lift_value_buffers = _lift  # a reply's value: a top-level big buffer becomes a frame


def _ndarray_marker(array: Any, buffers: list) -> msgpack.ExtType:
    """A numpy array as [frame index or inline bytes, dtype, shape]; refused (-> pickle) for
    dtypes a dtype string cannot name (objects, structured and void types)."""
    dtype = array.dtype
    if dtype.hasobject or dtype.kind == "V":
        raise TypeError(f"numpy dtype {dtype} travels pickled")
    if not array.flags.c_contiguous:
        array = array.copy(order="C")  # a strided view has no single buffer to send
    if array.nbytes >= OOB_MIN_BYTES:
        buffers.append(array)
        data: Any = len(buffers) - 1
    else:  # small: an extra frame costs more than the copy
        data = array.tobytes()
    return msgpack.ExtType(_EXT_NDARRAY, _plain.pack([data, dtype.str, list(array.shape)]))


class _Sink:
    """Where the packer's `default` puts the buffers it lifts (None: refuse them)."""

    __slots__ = ("buffers",)

    def __init__(self) -> None:
        self.buffers: list | None = None

    def __call__(self, obj: Any) -> Any:
        buffers = self.buffers
        if buffers is not None:
            kind = type(obj)
            if kind is bytearray or kind is memoryview:
                return _marker(_BIG_TYPES[kind], obj, buffers)
            if kind.__name__ == "ndarray" and kind.__module__ == "numpy":
                return _ndarray_marker(obj, buffers)
        raise TypeError(f"not plain msgpack data: {type(obj).__name__}")


# Packs the small [data, dtype, shape] of an array marker; no default: refuses the rest.
_plain = msgpack.Packer(use_bin_type=True, strict_types=True)

# A Packer costs ~2 us to build, more than packing a small call, so each thread keeps one.
# Not shared between threads: `default` runs Python code, during which another thread could
# otherwise write into the same buffer.
_per_thread = threading.local()


def packb(obj: Any, buffers: list | None = None) -> bytes:
    """msgpack with exact types only; raises TypeError/OverflowError/ValueError otherwise.

    With `buffers`, bytearrays, memoryviews and numpy arrays anywhere in `obj` become
    ExtType markers and their memory is appended to `buffers` (sent as frames, not copied).
    """
    try:
        packer, sink = _per_thread.packer, _per_thread.sink
    except AttributeError:
        sink = _per_thread.sink = _Sink()
        packer = _per_thread.packer = msgpack.Packer(
            use_bin_type=True, strict_types=True, default=sink)
    sink.buffers = buffers
    try:
        return packer.pack(obj)
    finally:
        sink.buffers = None


def deep_lift(value: Any, buffers: list) -> Any:
    return _deep_lift(value, buffers)


def may_hold_big_bytes(packed: bytes) -> bool:
    """Could the msgpack `packed` hold bytes of OOB_MIN_BYTES or more? Such bytes pack as
    bin 32: 0xc6, a 4-byte length of at least 65,536, then that many bytes. Where no 0xc6
    is followed by such a length that fits in what follows, there are none, and the walk
    of has_nested_big_bytes (16 ms over a 10,000-worker snapshot) is not needed; a 0xc6
    inside other data (a float's bytes) can look like one, and then the caller walks."""
    find, end = packed.find, len(packed)
    at = find(b"\xc6")
    while at >= 0:
        n = int.from_bytes(packed[at + 1:at + 5], "big")
        if n >= OOB_MIN_BYTES and at + 5 + n <= end:
            return True
        at = find(b"\xc6", at + 1)
    return False


def has_nested_big_bytes(value: Any) -> bool:
    """Would deep_lift lift anything (bytes of OOB_MIN_BYTES or more in its lists and
    dicts)? A walk that builds nothing: a big reply without them (the controller's snapshot
    of 10,000 workers) keeps its first pack instead of being rebuilt and packed again."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is bytes and len(item) >= OOB_MIN_BYTES:
            return True
    return False


def pickle_value(value: Any, buffers: list) -> bytes:
    def out_of_band(pb: pickle.PickleBuffer) -> bool:
        if pb.raw().nbytes < OOB_MIN_BYTES:
            return True  # small: keep it in the pickle stream
        buffers.append(pb)
        return False

    return cloudpickle.dumps(value, protocol=5, buffer_callback=out_of_band)


def _ext_hook_for(frames: list) -> Any:
    def hook(code: int, data: bytes) -> Any:
        if code == _EXT_NDARRAY:
            return _ndarray_from(data, frames)
        index = int.from_bytes(data, "little")
        if index >= len(frames) or code not in (_EXT_BYTES, _EXT_BYTEARRAY, _EXT_MEMORYVIEW):
            raise ProtocolError(f"buffer marker {code}/{index} does not match {len(frames)} frames")
        view = _view(frames[index])
        if code == _EXT_BYTES:
            return copies.to_bytes(view)
        if code == _EXT_BYTEARRAY:
            return copies.to_bytearray(view)
        return view

    return hook


def _ndarray_from(data: bytes, frames: list) -> Any:
    """A read-only numpy array over its frame (no copy); its dtype and shape as sent."""
    try:
        where, dtype, shape = msgpack.unpackb(data, raw=False)
        if type(where) is int:
            if not 0 <= where < len(frames):
                raise ProtocolError(f"array marker names frame {where} of {len(frames)}")
            where = _view(frames[where])
        array = _numpy().frombuffer(where, dtype=dtype).reshape(shape)
    except ProtocolError:
        raise
    except Exception as exc:  # wrong dtype string, shape not matching the frame's size, ...
        raise ProtocolError(f"malformed array marker: {type(exc).__name__}: {exc}") from exc
    array.flags.writeable = False  # inline data is a bytes object: read-only like a frame
    return array


def _numpy() -> Any:
    # Imported on the first array received, not at import: 60-100 ms that a process which
    # never sees an array should not pay. A sender of arrays has numpy, a receiver needs it.
    return importlib.import_module("numpy")


def _view(frame: Any) -> memoryview:
    """A ZeroMQ Frame's memory, or a read-only view of any other buffer (a shared-memory
    view, or an in-process caller's own bytearray or array, which the callee must not write)."""
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame).toreadonly()


def _no_frames(code: int, data: bytes) -> Any:
    if code == _EXT_NDARRAY:
        return _ndarray_from(data, [])
    raise ProtocolError(f"buffer marker {code} but the message has no buffer frames")


def unpackb(data: bytes, frames: list | None = None) -> Any:
    """Decode msgpack; ExtType markers are resolved against `frames` (the extra frames)."""
    hook = _ext_hook_for(frames) if frames else _no_frames
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=hook)


def unpickle_value(payload: bytes, frames: list) -> Any:
    if not isinstance(payload, bytes):
        raise ProtocolError(f"pickled payload must be bytes, got {type(payload).__name__}")
    return pickle.loads(payload, buffers=[_view(f) for f in frames])
