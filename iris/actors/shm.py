"""Same-host payloads through shared memory: big buffer frames written once into a memfd.

Not the codec (iris/wire/codec.py) nor the sockets (node.py). When caller and actor share a
host, a buffer frame of at least `shm_min_bytes` is copied once into an anonymous memfd
segment; the message carries an empty frame in its place plus a last "table" frame naming
the segment (sender pid, fd, inode). The receiver opens /proc/<pid>/fd/<fd>, maps it
read-only and hands the user views of the mapping: no socket copy, no receive copy.

Lifetime, with no name anywhere (nothing is ever created under /dev/shm):
- A memfd lives while an fd or a mapping refers to it. The sender holds the fd; a receiver
  claims its slot in the segment's first page (mapped, its pid), closes its fd, and marks
  the slot released when the user drops the last view (weakref finalizer, then munmap).
- The sender reuses a segment once every slot is released (its pages are warm: filling it
  is a memcpy, not page faults), or closes it: when a call that carried it ended with a
  receiver that never mapped it, or at the call's deadline. A reuse bumps the generation
  in the first page, so a message arriving after its sender gave up is refused, not misread.
- kill -9 of the sender: the kernel closes its fds; receivers that mapped keep their pages,
  a message not yet mapped fails to open (ProtocolError naming the sender). kill -9 of a
  receiver: its mapping goes with it; the sender sees its pid gone (checked each second)
  or its call fail, and stops holding the segment.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import pickle
import secrets
import threading
from typing import Any

import msgpack

from iris.actors.shm_map import (
    _NOT_MAPPED,
    _PAGE,
    _RELEASED,
    _SLOTS_AT,
    KEY_AT,
    KEY_BYTES,
    _libc,
    _map_views,
)
from iris.actors.shm_scope import BOOT_ID, FOREIGN, PID_NS, can_share
from iris.base.errors import ProtocolError

# Starts every table frame; 16 bytes a user's own last buffer will not begin with by chance.
MAGIC = b"\x00iris-shm-v4\x00\xfe\xfd\xfc"
# The first page is the segment's header (its layout: shm_map.py); data starts after it.
_DATA_OFFSET = _PAGE
MAX_RECEIVERS = (_PAGE - _SLOTS_AT) // 8
# A table frame is a few hundred bytes; a longer last frame is user data, never parsed.
_MAX_TABLE = 64 * 1024
_MEMFD_NAME = "iris-shm"
# A free segment unused this long is closed: it was sized for a payload no longer sent.
_IDLE_S = 30.0
# How often a segment mapped by receivers that never released it checks they still live (s).
_PID_CHECK_S = 1.0


def _nbytes(buf: Any) -> int:
    nbytes = getattr(buf, "nbytes", None)
    if nbytes is not None:
        return nbytes
    return memoryview(buf).nbytes


def _origin(buf: Any) -> Any:
    """The object whose memory a frame is: each pickling wraps an array in a new PickleBuffer."""
    return buf.raw().obj if isinstance(buf, pickle.PickleBuffer) else buf


class Segment:
    """One memfd holding the big buffer frames of a message (or of one message to N
    receivers). Reused for later messages once every receiver released its views."""

    __slots__ = ("fd", "inode", "capacity", "_map", "generation", "sources", "offsets",
                 "slots", "answers", "deadline", "idle_since", "pid_check", "key")
    owned = False  # an OwnedSegment (shm_owned.py) is filled by its owner, never pooled

    def __init__(self, capacity: int, populate: bool = False) -> None:
        self.capacity = capacity
        self.key = secrets.token_bytes(KEY_BYTES)  # in its header and in each table naming it
        self.fd = os.memfd_create(_MEMFD_NAME, os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, _DATA_OFFSET + capacity)
            self._map = mmap.mmap(self.fd, _DATA_OFFSET + capacity)
            self.inode = os.fstat(self.fd).st_ino
            if populate:
                _populate(self._map)
        except BaseException:
            os.close(self.fd)
            raise
        self.generation = 0
        self.sources: list = []
        self.offsets: list[tuple[int, int]] = []
        self.slots = self.answers = 0
        self.deadline = self.idle_since = self.pid_check = 0.0

    def fill(self, sources: list, sizes: list[int]) -> None:
        """Start a new use: bump the generation, clear the slots, copy the buffers in."""
        self.generation += 1
        self._map[0:_PAGE] = bytes(_PAGE)
        self._map[0:8] = self.generation.to_bytes(8, "little")
        self._map[KEY_AT:KEY_AT + KEY_BYTES] = self.key
        self.offsets = []
        offset = _DATA_OFFSET
        for buf, size in zip(sources, sizes, strict=True):
            self._map[offset:offset + size] = memoryview(buf).cast("B")
            self.offsets.append((offset, size))
            offset += size
        self.sources = sources

    def table(self, indices: list[int], slot: int, offsets: list | None = None) -> bytes:
        """The table frame for a message whose buffer frames `indices` are in this segment."""
        spans = [[i, off, size] for i, (off, size)
                 in zip(indices, offsets or self.offsets, strict=True)]
        return MAGIC + msgpack.packb([os.getpid(), self.fd, self.inode, BOOT_ID, PID_NS,
                                      self.generation, slot, spans, self.key])

    def _slot(self, i: int) -> tuple[int, int]:
        at = _SLOTS_AT + 8 * i
        return self._map[at], int.from_bytes(self._map[at + 4:at + 8], "little")

    def all_mapped(self) -> bool:
        return all(self._slot(i)[0] != _NOT_MAPPED for i in range(self.slots))

    def all_released(self, check_pids: bool) -> bool:
        """Every receiver dropped its views (or, with check_pids, died holding them)."""
        for i in range(self.slots):
            state, pid = self._slot(i)
            if state == _RELEASED:
                continue
            if state == _NOT_MAPPED or not check_pids or _alive(pid):
                return False
        return True

    def close(self) -> None:
        if self.fd >= 0:
            self._map.close()
            os.close(self.fd)
            self.fd = -1


# madvise(MADV_POPULATE_WRITE), Linux 5.14+ (Python 3.11 lacks the constant): faults every
# page in, writable, in one call. A first fill of a fresh segment pays those faults inside
# the copy (512 MiB: 0.76-0.82 s here); populated beforehand the copy takes 0.05-0.1 s and
# the populate 0.37-0.67 s, which a warm() does on its own thread before the first send.
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def _populate(mapping: mmap.mmap) -> bool:
    """Fault every page of `mapping` in now; False where the kernel cannot (pre-5.14).
    Through libc, not mmap.madvise, which holds the GIL: 1 GiB takes 1.5-3 s here, long
    enough for this process's peers to count it dead (its loop could not answer)."""
    probe = ctypes.c_char.from_buffer(mapping)
    address = ctypes.addressof(probe)
    del probe  # an export of the mmap: it could not be closed while held
    return _libc.madvise(address, len(mapping), _MADV_POPULATE_WRITE) == 0


def _alive(pid: int) -> bool:
    """Is process `pid` running? A zombie (killed, not yet reaped by its parent) is not."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


class Pool:
    """The segments a node sent (busy until their receivers release them) and the free ones
    kept for reuse: a reused segment's pages are already faulted in, so filling it is a
    plain memcpy (~10 GB/s here) where a fresh one pays page faults (~1.5 GB/s here).
    Thread-safe: spills happen on callers' and actors' threads, sweeps on the loop."""

    def __init__(self, keep_bytes: int) -> None:
        self._keep = keep_bytes
        self._lock = threading.Lock()
        self._free: list[Segment] = []
        self._busy: set[Segment] = set()
        self._warming: list[tuple[int, threading.Event]] = []
        self._owned: list = []  # OwnedSegments (shm_owned.py): sent as they are, no copy
        self._closed = False
        self.copied_bytes = 0  # copied into segments so far (a send from an owned one: 0)

    def warm(self, size: int, count: int = 1) -> threading.Thread:
        """Make `count` segments for payloads of `size` bytes, their pages faulted in, on a
        thread of their own: the first sends of that size are then a memcpy, not page
        faults. A send that needs one while it is being made waits for it."""
        if size <= 0 or count <= 0:
            raise ValueError(f"warm: size and count must be > 0, got {size}, {count}")
        done = [threading.Event() for _ in range(count)]
        with self._lock:
            self._warming.extend((size, event) for event in done)

        def run() -> None:
            for event in done:
                try:
                    segment = Segment(size, populate=True)
                except OSError:  # out of memory for it: sends will make their own
                    segment = None
                with self._lock:
                    self._warming.remove((size, event))
                    if segment is not None and self._closed:
                        segment.close()
                    elif segment is not None:
                        segment.idle_since = float("inf")  # kept until first used
                        self._free.append(segment)
                event.set()

        thread = threading.Thread(target=run, name="iris-shm-warm", daemon=True)
        thread.start()
        return thread

    def spill(self, frames: list, min_bytes: int, segment: Segment | None = None,
              slot: int = 0) -> tuple[list, Segment | None]:
        """`frames` with their buffer frames of >= min_bytes moved into a segment (a new one,
        or `segment` when it already holds these very buffers: a broadcast copies once)."""
        indices = [i for i in range(1, len(frames)) if _nbytes(frames[i]) >= min_bytes]
        if not indices or slot >= MAX_RECEIVERS:
            return frames, None
        sources = [frames[i] for i in indices]
        offsets = None
        if segment is None or len(segment.sources) != len(sources) or any(
                _origin(a) is not _origin(b)
                for a, b in zip(segment.sources, sources, strict=True)):
            segment, offsets = self._owner_of(sources)
            if segment is None:
                sizes = [_nbytes(b) for b in sources]
                segment = self._acquire(sum(sizes))
                segment.fill(sources, sizes)
                self.copied_bytes += sum(sizes)
                slot = 0  # the first receiver of a new segment
        if segment.owned:  # its slots count up over every send of it, from any thread
            offsets, slot = offsets or segment.offsets, segment.reserve()
            if slot >= MAX_RECEIVERS:
                return frames, None
        out = list(frames)
        for i in indices:
            out[i] = b""
        out.append(segment.table([i - 1 for i in indices], slot, offsets))
        return out, segment

    def own(self, segment: Any) -> None:
        """Send buffers that lie in `segment` (an OwnedSegment) from it as they are."""
        with self._lock:
            self._owned.append(segment)

    def disown(self, segment: Any) -> None:
        with self._lock:
            if segment in self._owned:
                self._owned.remove(segment)

    def _owner_of(self, sources: list) -> tuple[Any, list | None]:
        """(the owned segment every source lies in, their offsets in it) or (None, None)."""
        with self._lock:
            owned = list(self._owned)
        for segment in owned:
            offsets = segment.offsets_of(sources)
            if offsets is not None:
                return segment, offsets
        return None, None

    def _acquire(self, size: int) -> Segment:
        with self._lock:
            warming = [e for want, e in self._warming if size <= want <= 2 * size + _PAGE]
        if warming:  # being faulted in for this very size: sooner than a fresh one
            warming[0].wait()
        with self._lock:
            fits = [s for s in self._free if size <= s.capacity <= 2 * size + _PAGE]
            if fits:
                best = min(fits, key=lambda s: s.capacity)
                self._free.remove(best)
                return best
            for segment in self._busy:  # released since the last sweep (calls in a row)
                if (size <= segment.capacity <= 2 * size + _PAGE and segment.answers <= 0
                        and segment.all_released(False)):
                    self._busy.discard(segment)
                    return segment
        return Segment(size)

    def sent(self, segment: Segment, slots: int, answers: int, deadline: float) -> None:
        """`segment` went to `slots` receivers; `answers` calls will report back on it. The
        buffers it was filled from are the sender's again: keeping them until the segment
        is swept kept a received payload alive in an actor that echoed it (the caller's
        segment then could not be reused for the next call)."""
        with self._lock:
            if segment.owned:  # its owner decides when it is written again (quiet())
                segment.answers += answers
                segment.deadline = max(segment.deadline, deadline)
                return
            segment.slots, segment.answers, segment.deadline = slots, answers, deadline
            segment.sources = []
            self._busy.add(segment)

    def answered(self, segment: Segment) -> None:
        """A call that carried `segment` is over. If some receiver never mapped it, it never
        will (or too late): close it rather than reuse memory a late reader could map."""
        with self._lock:
            segment.answers -= 1
            if not segment.owned and segment.answers <= 0 and segment in self._busy and not segment.all_mapped():
                self._busy.discard(segment)
                segment.close()

    def sweep(self, now: float) -> None:
        with self._lock:
            for segment in list(self._busy):
                check = now >= segment.pid_check
                if check:
                    segment.pid_check = now + _PID_CHECK_S
                if segment.answers <= 0 and segment.all_released(check):
                    self._busy.discard(segment)
                    segment.sources = []  # the user's buffers are theirs again
                    segment.idle_since = now
                    self._free.append(segment)
                elif now > segment.deadline and not segment.all_mapped():
                    self._busy.discard(segment)
                    segment.close()
            self._free.sort(key=lambda s: s.idle_since, reverse=True)
            kept, total = [], 0
            for segment in self._free:
                if total + segment.capacity <= self._keep and now - segment.idle_since < _IDLE_S:
                    kept.append(segment)
                    total += segment.capacity
                else:
                    segment.close()
            self._free = kept

    def busy(self) -> int:
        return len(self._busy)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for segment in [*self._busy, *self._free, *self._owned]:
                segment.close()
            self._busy.clear()
            self._free.clear()
            self._owned.clear()


def is_table(frame: Any) -> bool:
    """Is this buffer frame a shared-memory table (the last frame of a spilled message)?"""
    view = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
    return len(MAGIC) < view.nbytes < _MAX_TABLE and view[:len(MAGIC)] == MAGIC


def resolve(buffers: list) -> list:
    """Buffer frames as the codec expects them: a trailing table frame is replaced by views of
    the segment it names. Raises ProtocolError when the segment cannot be mapped."""
    if not buffers or not is_table(buffers[-1]):
        return buffers
    last = buffers[-1]
    raw = last.bytes if hasattr(last, "bytes") else bytes(last)
    try:
        pid, fd, inode, boot, pid_ns, generation, slot, spans, key = msgpack.unpackb(
            raw[len(MAGIC):])
    except Exception as exc:
        raise ProtocolError(f"malformed shared-memory table: {exc}") from exc
    if boot != BOOT_ID:
        raise ProtocolError("shared-memory payload from another host (boot id differs)")
    if not can_share((BOOT_ID, PID_NS), (boot, pid_ns)):
        raise ProtocolError(f"shared-memory payload from {FOREIGN} (pid namespace "
                            f"{pid_ns}, ours {PID_NS}): send it through the socket")
    if not 0 <= slot < MAX_RECEIVERS:
        raise ProtocolError(f"shared-memory slot {slot} out of range")
    if type(key) is not bytes or len(key) != KEY_BYTES:
        raise ProtocolError(f"shared-memory table: its key is {KEY_BYTES} bytes")
    view = _map(pid, fd, inode, generation, slot, key)
    out = list(buffers[:-1])
    for index, offset, size in spans:
        if not (0 <= index < len(out) and offset >= _DATA_OFFSET
                and offset + size <= view.nbytes):
            raise ProtocolError(f"shared-memory span {index}/{offset}/{size} is out of range")
        out[index] = view[offset:offset + size]
    return out


def _map(pid: int, fd: int, inode: int, generation: int, slot: int,
         key: bytes) -> memoryview:
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
        return _map_views(own, os.fstat(own).st_size, generation, slot, key)
    finally:
        os.close(own)
