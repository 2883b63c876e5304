"""The reader's side of a shared-memory segment (shm.py): the header page's layout and
the mapping of a received segment, read-only, released when its last view goes. Through
libc's mmap, not mmap.mmap (_map_views says why)."""

from __future__ import annotations

import ctypes
import hmac
import mmap
import os
import weakref

from iris.base.errors import ProtocolError

# The first page is the segment's header; data starts page-aligned after it. Header layout:
# [0:8] generation (u64 little-endian, bumped at every reuse), [8:24] the segment's key (16
# random bytes, also in every table naming it), then from byte 64 one 8-byte slot per
# receiver of the message: [state u8, 3 unused, receiver pid u32].
_PAGE = max(mmap.PAGESIZE, 4096)
_SLOTS_AT = 64
# A table must name the key its segment holds before the receiver marks a slot or reads a
# byte of it: pid, fd and inode can be guessed, so without it any process on the host that
# could send a call made the receiver open another process's segment (read-write) and
# mark its slots released while its real receiver still read it.
KEY_AT, KEY_BYTES = 8, 16
_NOT_MAPPED, _MAPPED, _RELEASED = 0, 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MAP_FAILED = ctypes.c_void_p(-1).value


def _mmap(fd: int, size: int, prot: int) -> int:
    address = _libc.mmap(None, size, prot, mmap.MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        raise ProtocolError("cannot map a shared-memory payload: "
                            f"{os.strerror(ctypes.get_errno())}")
    return address


def _map_views(fd: int, size: int, generation: int, slot: int, key: bytes) -> memoryview:
    """A read-only view of the whole segment; claims `slot` (mapped, our pid) and marks it
    released when the last view of it is dropped, so the sender may reuse the segment.

    Not mmap.mmap: before Python 3.13 it keeps a dup of the fd for its whole life, so every
    payload a user keeps would hold an fd (1,024 by default) and the memfd would show as
    open in this process long after its sender is gone."""
    header = _mmap(fd, _PAGE, mmap.PROT_READ | mmap.PROT_WRITE)
    head = (ctypes.c_char * _PAGE).from_address(header)
    if not hmac.compare_digest(head[KEY_AT:KEY_AT + KEY_BYTES], key):
        _libc.munmap(header, _PAGE)
        raise ProtocolError("shared-memory table names a segment whose key differs: not "
                            "the sender's (refused unread)")
    if int.from_bytes(head[0:8], "little") != generation:
        _libc.munmap(header, _PAGE)
        raise ProtocolError("shared-memory payload was reused before it was read: it "
                            "arrived after its sender gave up on it")
    data = _mmap(fd, size, mmap.PROT_READ)
    at = _SLOTS_AT + 8 * slot
    head[at + 4:at + 8] = os.getpid().to_bytes(4, "little")
    head[at] = bytes([_MAPPED])
    pages = (ctypes.c_char * size).from_address(data)
    weakref.finalize(pages, _release, header, data, size, at)
    return memoryview(pages).cast("B").toreadonly()


def _release(header: int, data: int, size: int, at: int) -> None:
    _libc.munmap(data, size)
    ctypes.c_char.from_address(header + at).value = bytes([_RELEASED])
    _libc.munmap(header, _PAGE)
