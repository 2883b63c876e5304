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

import pickle
import threading
from typing import Any

import cloudpickle
import msgpack

from iris.base.errors import ProtocolError

FORMAT_MSGPACK = 0
FORMAT_PICKLE = 1

# Below 64 KiB a copy is cheaper than an extra ZeroMQ frame (pyzmq copies small frames anyway:
# its copy_threshold is 64 KiB too).
OOB_MIN_BYTES = 64 * 1024

_EXT_BYTES, _EXT_BYTEARRAY, _EXT_MEMORYVIEW = 1, 2, 3
_BIG_TYPES = {bytes: _EXT_BYTES, bytearray: _EXT_BYTEARRAY, memoryview: _EXT_MEMORYVIEW}


def _lift(value: Any, buffers: list) -> Any:
    """Replace a buffer by an ExtType marker pointing at an extra frame.

    bytes go out of band only when big; bytearray and memoryview always do, because msgpack
    would hand them back as bytes and the caller would not get the type it sent.
    """
    code = _BIG_TYPES.get(type(value))
    if code is None or (code == _EXT_BYTES and len(value) < OOB_MIN_BYTES):
        return value
    buffers.append(value)
    return msgpack.ExtType(code, (len(buffers) - 1).to_bytes(4, "little"))


def lift_call_buffers(args: tuple, kwargs: dict, buffers: list) -> list:
    """[args, kwargs] with their top-level big buffers lifted into `buffers`."""
    for arg in args:
        if type(arg) in _BIG_TYPES:
            break
    else:
        if not kwargs:  # the common small call: no comprehension, no per-item checks
            return [list(args), kwargs]
    return [[_lift(a, buffers) for a in args],
            {k: _lift(v, buffers) for k, v in kwargs.items()} if kwargs else kwargs]


def lift_value_buffers(value: Any, buffers: list) -> Any:
    return _lift(value, buffers)


def _refuse(obj: Any) -> Any:
    raise TypeError(f"not plain msgpack data: {type(obj).__name__}")


# A Packer costs ~2 us to build, more than packing a small call, so each thread keeps one.
# Not shared between threads: `default` runs Python code, during which another thread could
# otherwise write into the same buffer.
_per_thread = threading.local()


def packb(obj: Any) -> bytes:
    """msgpack with exact types only; raises TypeError/OverflowError/ValueError otherwise."""
    try:
        packer = _per_thread.packer
    except AttributeError:
        packer = _per_thread.packer = msgpack.Packer(
            use_bin_type=True, strict_types=True, default=_refuse)
    return packer.pack(obj)


def pickle_value(value: Any, buffers: list) -> bytes:
    def out_of_band(pb: pickle.PickleBuffer) -> bool:
        if pb.raw().nbytes < OOB_MIN_BYTES:
            return True  # small: keep it in the pickle stream
        buffers.append(pb)
        return False

    return cloudpickle.dumps(value, protocol=5, buffer_callback=out_of_band)


def _ext_hook_for(frames: list) -> Any:
    def hook(code: int, data: bytes) -> Any:
        index = int.from_bytes(data, "little")
        if index >= len(frames) or code not in (_EXT_BYTES, _EXT_BYTEARRAY, _EXT_MEMORYVIEW):
            raise ProtocolError(f"buffer marker {code}/{index} does not match {len(frames)} frames")
        view = _view(frames[index])
        if code == _EXT_BYTES:
            return bytes(view)
        if code == _EXT_BYTEARRAY:
            return bytearray(view)
        return view

    return hook


def _view(frame: Any) -> memoryview:
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame)


def _no_frames(code: int, data: bytes) -> Any:
    raise ProtocolError(f"buffer marker {code} but the message has no buffer frames")


def unpackb(data: bytes, frames: list | None = None) -> Any:
    """Decode msgpack; ExtType markers are resolved against `frames` (the extra frames)."""
    hook = _ext_hook_for(frames) if frames else _no_frames
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=hook)


def unpickle_value(payload: bytes, frames: list) -> Any:
    if not isinstance(payload, bytes):
        raise ProtocolError(f"pickled payload must be bytes, got {type(payload).__name__}")
    return pickle.loads(payload, buffers=[_view(f) for f in frames])
