"""Same-host payloads through shared memory: big buffer frames written once into a memfd.

Not the codec (iris/wire/codec.py) nor the sockets (node.py). When caller and actor share a
host, a buffer frame of at least `shm_min_bytes` is copied once into an anonymous memfd
segment; the message carries an empty frame in its place plus a last "table" frame naming
the segment (sender pid, fd, inode). The receiver opens /proc/<pid>/fd/<fd>, maps it
read-only and hands the user views of the mapping: no socket copy, no receive copy.

Lifetime, with no name anywhere (nothing is ever created under /dev/shm):
- A memfd lives while an fd or a mapping refers to it. The sender holds the fd; a receiver,
  once it has mapped the segment, writes 1 into its ack byte (one per receiver, in the first
  page) and closes its fd; its mapping lives as long as the user keeps the data.
- The sender closes its fd when the call completes (a reply means the receiver mapped it),
  or when every receiver acked, or at a deadline (a receiver that died before mapping).
- kill -9 of the sender: the kernel closes its fds; receivers that mapped keep their pages,
  a message not yet mapped fails to open (ProtocolError naming the sender). kill -9 of a
  receiver: its mapping goes with it; the sender's fd goes at the ack or the deadline.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import pickle
import weakref
from typing import Any

import msgpack

from iris.base.errors import ProtocolError

# Starts every table frame; 16 bytes a user's own last buffer will not begin with by chance.
MAGIC = b"\x00iris-shm-v1\x00\xfe\xfd\xfc"
# Data starts one page in: the first page holds one ack byte per receiver (up to 4,096).
_DATA_OFFSET = mmap.PAGESIZE if mmap.PAGESIZE >= 4096 else 4096
MAX_RECEIVERS = _DATA_OFFSET
# A table frame is a few hundred bytes; a longer last frame is user data, never parsed.
_MAX_TABLE = 64 * 1024
_MEMFD_NAME = "iris-shm"


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


BOOT_ID = _boot_id()
AVAILABLE = hasattr(os, "memfd_create") and bool(BOOT_ID)


def same_host(address: str) -> bool:
    """Is `address` (a ZeroMQ endpoint) certainly on this host? Loopback and ipc only: a
    routable address may be this host too, but then TCP is the safe choice."""
    return (address.startswith("tcp://127.") or address.startswith("tcp://localhost:")
            or address.startswith("ipc://") or address.startswith("tcp://[::1]"))


def _nbytes(buf: Any) -> int:
    nbytes = getattr(buf, "nbytes", None)
    if nbytes is not None:
        return nbytes
    return memoryview(buf).nbytes


class Segment:
    """One memfd holding some buffer frames of a message (or of one message to N receivers)."""

    __slots__ = ("fd", "inode", "size", "_map", "sources", "offsets", "holders", "deadline")

    def __init__(self, sources: list) -> None:
        sizes = [_nbytes(b) for b in sources]
        self.size = _DATA_OFFSET + sum(sizes)
        self.fd = os.memfd_create(_MEMFD_NAME, os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, self.size)
            self._map = mmap.mmap(self.fd, self.size)
            self.offsets = []
            offset = _DATA_OFFSET
            for buf, size in zip(sources, sizes, strict=True):
                self._map[offset:offset + size] = memoryview(buf).cast("B")
                self.offsets.append((offset, size))
                offset += size
            self.inode = os.fstat(self.fd).st_ino
        except BaseException:
            os.close(self.fd)
            raise
        self.sources = sources
        self.holders = 0  # messages sent from it whose receivers have not answered yet
        self.deadline = 0.0

    def table(self, indices: list[int], slot: int) -> bytes:
        """The table frame for a message whose buffer frames `indices` are in this segment."""
        spans = [[i, off, size] for i, (off, size) in zip(indices, self.offsets, strict=True)]
        return MAGIC + msgpack.packb([os.getpid(), self.fd, self.inode, BOOT_ID, slot, spans])

    def acked(self, slots: int) -> bool:
        return self._map.find(b"\x00", 0, slots) == -1

    def close(self) -> None:
        if self.fd >= 0:
            self._map.close()
            os.close(self.fd)
            self.fd = -1


def spill(frames: list, min_bytes: int, segment: Segment | None = None,
          slot: int = 0) -> tuple[list, Segment | None]:
    """`frames` with their buffer frames of >= min_bytes moved into a segment (a new one, or
    `segment` when it already holds these very buffers: a broadcast copies them once)."""
    indices = [i for i in range(1, len(frames)) if _nbytes(frames[i]) >= min_bytes]
    if not indices:
        return frames, None
    sources = [frames[i] for i in indices]
    if segment is None or len(segment.sources) != len(sources) or any(
            _origin(a) is not _origin(b) for a, b in zip(segment.sources, sources, strict=True)):
        segment = Segment(sources)
    out = list(frames)
    for i in indices:
        out[i] = b""
    out.append(segment.table([i - 1 for i in indices], slot))
    return out, segment


def _origin(buf: Any) -> Any:
    """The object whose memory a frame is: each pickling wraps an array in a new PickleBuffer."""
    return buf.raw().obj if isinstance(buf, pickle.PickleBuffer) else buf


def _is_table(frame: Any) -> bool:
    view = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
    return len(MAGIC) < view.nbytes < _MAX_TABLE and view[:len(MAGIC)] == MAGIC


def resolve(buffers: list) -> list:
    """Buffer frames as the codec expects them: a trailing table frame is replaced by views of
    the segment it names. Raises ProtocolError when the segment cannot be mapped."""
    if not buffers or not _is_table(buffers[-1]):
        return buffers
    last = buffers[-1]
    raw = last.bytes if hasattr(last, "bytes") else bytes(last)
    try:
        pid, fd, inode, boot, slot, spans = msgpack.unpackb(raw[len(MAGIC):])
    except Exception as exc:
        raise ProtocolError(f"malformed shared-memory table: {exc}") from exc
    if boot != BOOT_ID:
        raise ProtocolError("shared-memory payload from another host (boot id differs)")
    view = _map(pid, fd, inode, slot)
    out = list(buffers[:-1])
    for index, offset, size in spans:
        if not (0 <= index < len(out) and offset + size <= view.nbytes and offset >= 0):
            raise ProtocolError(f"shared-memory span {index}/{offset}/{size} is out of range")
        out[index] = view[offset:offset + size]
    return out


def _map(pid: int, fd: int, inode: int, slot: int) -> memoryview:
    path = f"/proc/{int(pid)}/fd/{int(fd)}"
    try:
        own = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise ProtocolError(f"shared-memory payload of process {pid} is gone ({exc.strerror}):"
                            " the sender exited or gave up before it was read") from exc
    try:
        if os.fstat(own).st_ino != inode or not os.readlink(
                f"/proc/self/fd/{own}").startswith(f"/memfd:{_MEMFD_NAME}"):
            raise ProtocolError(f"shared-memory payload of process {pid} is gone "
                                "(its fd now names another file)")
        view = _map_read_only(own, os.fstat(own).st_size)
        if 0 <= slot < MAX_RECEIVERS:
            os.pwrite(own, b"\x01", slot)  # ack: the sender may close its fd now
    finally:
        os.close(own)
    return view


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_MAP_FAILED = ctypes.c_void_p(-1).value


def _map_read_only(fd: int, size: int) -> memoryview:
    """A read-only view of the whole file, unmapped when the last view of it is dropped.

    Not mmap.mmap: before Python 3.13 it keeps a dup of the fd for its whole life, so every
    payload a user keeps would hold an fd (1,024 by default) and the memfd would show as
    open in this process long after its sender is gone."""
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise ProtocolError(f"cannot map a shared-memory payload: {os.strerror(err)}")
    pages = (ctypes.c_char * size).from_address(address)
    weakref.finalize(pages, _libc.munmap, address, size)
    return memoryview(pages).cast("B").toreadonly()
