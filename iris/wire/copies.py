"""Copies of received buffers into new `bytes` and `bytearray` objects: the one copy a
receiver cannot avoid (a bytes object owns its memory), made as cheap as this host allows.

Not the codec (codec.py decides what to copy; this only copies). A big copy lands in memory
malloc has just mapped, so it pays one page fault per 4 KiB: 16,384 for 64 MiB, 150 ms on
this VM when loaded and most of a 64 MiB echo's time. Advised as huge pages (MADV_HUGEPAGE,
honoured when /sys/kernel/mm/transparent_hugepage/enabled is `madvise` or `always`), the same
copy faults 32 times and took 28 ms (bench/call_costs.py). The object is made with its
contents unset (the C API's PyBytes_FromStringAndSize(NULL, n)), advised, then filled; nothing else sees
it before it is full. Where THP is off this is a plain
copy, no slower than bytes(view).
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any

# Below this a copy faults few pages and bytes(view) is as fast; 2 MiB is one huge page.
HUGE_MIN_BYTES = 4 << 20
_HUGE = 2 << 20
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)

_api = ctypes.pythonapi
_new_bytes = _api.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.c_void_p  # a new reference: taken over by _adopt
_new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_new_bytearray = _api.PyByteArray_FromStringAndSize
_new_bytearray.restype = ctypes.c_void_p
_new_bytearray.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_decref = _api.Py_DecRef
_decref.argtypes = (ctypes.c_void_p,)
_libc = ctypes.CDLL(None, use_errno=True)
_madvise = _libc.madvise
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def _adopt(pointer: int | None) -> Any:
    """The object a new reference points to, owned by Python (no extra reference left)."""
    if not pointer:
        raise MemoryError("cannot allocate a buffer for a received payload")
    obj = ctypes.cast(pointer, ctypes.py_object).value  # takes a reference of its own
    _decref(pointer)
    return obj


def _fill(dest: int, view: memoryview) -> None:
    """Advise [dest, dest + n) as huge pages (its 2 MiB-aligned inside), then copy into it."""
    n = view.nbytes
    start = (dest + _HUGE - 1) & ~(_HUGE - 1)
    end = (dest + n) & ~(_HUGE - 1)
    if end > start:
        _madvise(start, end - start, _MADV_HUGEPAGE)  # advice only: a refusal costs nothing
    target = memoryview((ctypes.c_char * n).from_address(dest)).cast("B")
    target[:] = view if view.format == "B" else view.cast("B")


def to_bytes(view: memoryview) -> bytes:
    """bytes(view), for a contiguous view; big ones copied into huge pages."""
    n = view.nbytes
    if n < HUGE_MIN_BYTES:
        return bytes(view)
    out = _adopt(_new_bytes(None, n))
    _fill(ctypes.cast(ctypes.c_char_p(out), ctypes.c_void_p).value, view)
    return out


def to_bytearray(view: memoryview) -> bytearray:
    """bytearray(view), for a contiguous view; big ones copied into huge pages."""
    n = view.nbytes
    if n < HUGE_MIN_BYTES:
        return bytearray(view)
    out = _adopt(_new_bytearray(None, n))
    _fill(ctypes.addressof((ctypes.c_char * n).from_buffer(out)), view)
    return out
