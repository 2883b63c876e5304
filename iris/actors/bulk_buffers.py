"""Receive buffers of the bulk path, reused once the user dropped every view of them.

Not what lands in them (relay.py, bulk_calls.py). A receiver opens each chunk straight into
one buffer per payload and hands the user read-only views of it. A fresh anonymous mapping
costs a page fault per 4 KiB as the chunks land: 0.21 CPU-s per 256 MiB on this VM (~3 us
a fault; transparent huge pages are not granted here), as much as opening the chunks
itself. An RL rollout drops version v when v+1 arrives, so the buffer of v is free for
v+2: `take()` hands out a buffer whose pages are already faulted in, when one of that
size was released.

Release is found as shm.py finds it: the buffer is a ctypes array over the mapping, every
view the user gets is a view of that array, and a weakref finalizer runs when the last one
is gone (in whichever thread dropped it).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import weakref

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_MAP_FAILED = ctypes.c_void_p(-1).value


class Buffers:
    """Released receive buffers kept for reuse, up to `keep_bytes` in all."""

    def __init__(self, keep_bytes: int):
        self._keep = keep_bytes
        self._free: dict[int, list[int]] = {}  # size -> addresses released, oldest first
        self._kept = 0
        self._lock = threading.Lock()
        self._closed = False
        self.reused = 0  # how many take() found a warm buffer

    def take(self, size: int) -> memoryview:
        """A writable buffer of `size` bytes (its pages faulted in if it is a reused one)."""
        if size == 0:
            return memoryview(bytearray())
        address = None
        with self._lock:
            free = self._free.get(size)
            if free:
                address = free.pop()  # the most recently released: its pages are warmest
                self._kept -= size
                self.reused += 1
        if address is None:
            address = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                                 mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
            if address in (None, _MAP_FAILED):
                raise MemoryError(f"cannot map a {size}-byte receive buffer: "
                                  f"{os.strerror(ctypes.get_errno())}")
        pages = (ctypes.c_char * size).from_address(address)
        weakref.finalize(pages, self._released, address, size)
        return memoryview(pages).cast("B")

    def _released(self, address: int, size: int) -> None:
        with self._lock:
            if not self._closed and size <= self._keep:
                self._free.setdefault(size, []).append(address)
                self._kept += size
                while self._kept > self._keep:  # the oldest of the biggest class go first
                    length = max(self._free, key=lambda n: n * len(self._free[n]))
                    _libc.munmap(self._free[length].pop(0), length)
                    self._kept -= length
                    if not self._free[length]:
                        del self._free[length]
                return
        _libc.munmap(address, size)

    def close(self) -> None:
        """Unmap the kept buffers; buffers still in use are unmapped when released."""
        with self._lock:
            self._closed = True
            free, self._free, self._kept = self._free, {}, 0
        for length, addresses in free.items():
            for at in addresses:
                _libc.munmap(at, length)
