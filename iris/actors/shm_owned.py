"""A shared-memory segment its owner writes in place and sends as it is: no copy at send.

Not the pool of copied segments (shm.py): an OwnedSegment is made by a user of the node
(weights_buffers.py: a Publisher's next version), handed out as writable numpy arrays over
its pages, and registered with the node's Pool, which then sends any buffer frame lying
inside it by naming its span (Pool.spill) instead of copying it into a segment of its own.

Readers are tracked as in shm.py: each send reserves a slot in the first page, a receiver
marks it mapped, then released when its last view goes. The owner may write the segment
again only once it is quiet(): every slot released (or its receiver dead, or never mapped
by a call that is over), and then rewrite() bumps the generation, so a message naming the
old contents that arrives late is refused rather than read as the new ones.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from iris.actors import shm
from iris.actors.shm_map import _MAPPED, _PAGE, _RELEASED

_ALIGN = 64  # each array starts on a cache line


class OwnedSegment(shm.Segment):
    owned = True

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, populate=True)
        probe = ctypes.c_char.from_buffer(self._map)
        self.base = ctypes.addressof(probe)  # where the mapping starts in this process
        del probe  # (an export of the mmap: it could not be closed while held)
        self._slot_lock = threading.Lock()
        self.version = 0  # what the owner filled it with last (0: nothing yet)

    def arrays(self, layout: dict) -> dict:
        """{name: writable array} laid out one after another after the header page;
        `layout` is {name: (shape, dtype)}, already checked to fit (fits())."""
        np = numpy_module()
        out, offset = {}, shm._DATA_OFFSET
        for name, (shape, dtype) in layout.items():
            count = int(np.prod(shape, dtype=np.int64))
            out[name] = np.frombuffer(self._map, dtype, count, offset).reshape(shape)
            offset += _aligned(count * np.dtype(dtype).itemsize)
        return out

    def offsets_of(self, sources: list) -> list | None:
        """[(offset, size)] of each buffer in this segment, or None if one lies outside."""
        if self.fd < 0:
            return None
        out, end = [], self.base + shm._DATA_OFFSET + self.capacity
        for buf in sources:
            start = _address(buf)
            size = shm._nbytes(buf)
            if start is None or not self.base + shm._DATA_OFFSET <= start <= end - size:
                return None
            out.append((start - self.base, size))
        return out

    def reserve(self) -> int:
        """The slot of one more receiver (>= shm.MAX_RECEIVERS: no room, send a copy)."""
        with self._slot_lock:
            self.slots += 1
            return self.slots - 1

    def quiet(self, now: float) -> bool:
        """May the owner write it again? No receiver holds a view, nor will map one."""
        with self._slot_lock:
            slots = min(self.slots, shm.MAX_RECEIVERS)
        calls_over = self.answers <= 0 and now > self.deadline
        for i in range(slots):
            state, pid = self._slot(i)
            if state == _RELEASED or (state == _MAPPED and not shm._alive(pid)):
                continue
            if state == shm._NOT_MAPPED and calls_over:
                continue  # its call ended unmapped: a late reader sees the new generation
            return False
        return self.answers <= 0

    def rewrite(self, version: int) -> None:
        """Start filling it for `version`: a new generation, no slots."""
        with self._slot_lock:
            self.generation += 1
            self._map[0:_PAGE] = bytes(_PAGE)
            self._map[0:8] = self.generation.to_bytes(8, "little")
            self._map[shm.KEY_AT:shm.KEY_AT + shm.KEY_BYTES] = self.key
            self.slots, self.answers, self.deadline = 0, 0, 0.0
            self.version = version

    def close(self) -> None:
        if self.fd < 0:
            return
        try:
            self._map.close()
        except BufferError:  # arrays over it still live: the mapping goes with the last
            pass
        os.close(self.fd)
        self.fd = -1


def numpy_module() -> Any:
    """numpy, imported on first use: `import iris` must not load it, because its threads
    stop the worker's zygote from forking (it refuses to preload a thread;
    tests/test_imports.py)."""
    import numpy

    return numpy


def layout_size(layout: dict) -> int:
    np = numpy_module()
    return sum(_aligned(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
               for shape, dtype in layout.values())


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def _address(buf: Any) -> int | None:
    """Where a contiguous buffer's bytes start in this process, or None."""
    np = numpy_module()
    try:
        view = memoryview(buf)
        if not view.c_contiguous:
            return None
        return np.frombuffer(view.cast("B") if view.ndim != 1 or view.format != "B" else view,
                             np.uint8).ctypes.data
    except (TypeError, ValueError):
        return None
