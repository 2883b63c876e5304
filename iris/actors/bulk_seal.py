"""Sealing bulk chunks: one fresh AEAD key per transfer, the chunk index as the nonce.

Not transport (bulk.py, bulk_fetch.py) nor what is sent (relay.py, bulk_calls.py): pure
functions of key, chunk index and bytes. No sockets, no threads, no clock.

- **Key**: 32 random bytes (os.urandom) made by the sender for one transfer: one weights
  version, or the big frames of one call. It reaches each receiver only inside a message of
  the CURVE-authenticated control connection (the chain's `attach`, a call's table frame).
  A key never leaves the process in any other way: `repr()` hides it, and nothing logs it.
- **Algorithm**: AES-256-GCM where the CPU has AES instructions (x86 `aes` flag, arm64
  `aes` feature), else ChaCha20-Poly1305 (constant-time in software). Both take a 96-bit
  nonce and append a 16-byte tag. The sender picks; every receiver opens either.
- **Nonce**: 4 zero bytes, then the chunk index (8 bytes, big-endian). It never repeats
  under one key, because a key belongs to one transfer and a transfer has exactly one
  plaintext per chunk index (its value is fixed): keys are never persisted, so a restarted
  sender makes new ones; a forwarder or a retry that seals chunk k again seals the same
  plaintext under the same nonce, which yields the same bytes (AEAD sealing is
  deterministic) and reveals nothing new. Nonce reuse is dangerous only for two *different*
  plaintexts under one (key, nonce) (GCM then leaks their XOR and its hash key): `Tags`
  records the tag of each chunk the first time it is sealed or received, and a re-seal
  whose tag differs (the weights were changed in place while being published) is refused
  before its bytes leave the process.
- **AAD**: "iris-bulk/1", the transfer id, the total size, the chunk size and the chunk
  index: a chunk moved to another position, another transfer or cut short fails to open.
- **Plaintext** (an explicit choice, `BulkConfig.plaintext`): no key, no tag; chunks travel
  as they are.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import platform
from typing import Any

from iris.base.errors import IrisError

AES_GCM = "aes-256-gcm"
CHACHA = "chacha20-poly1305"
PLAIN = "plaintext"
ALGORITHMS = (AES_GCM, CHACHA, PLAIN)
TAG_BYTES = 16
KEY_BYTES = 32
_AAD_LABEL = b"iris-bulk/1\x00"


class BulkError(IrisError):
    """A bulk transfer failed here: a chunk that does not authenticate, comes out of order
    or twice, has the wrong size, or a sender that is gone or refused. Nothing of that
    transfer is delivered."""


@functools.cache
def cpu_has_aes() -> bool:
    """Does this CPU have AES instructions (so AES-GCM runs in hardware)?"""
    machine = platform.machine().lower()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return "aes" in line.split(":", 1)[1].split()
    except OSError:
        pass
    return machine in ("arm64", "aarch64")  # macOS on Apple silicon: always has them


def default_algorithm(plaintext: bool) -> str:
    if plaintext:
        return PLAIN
    return AES_GCM if cpu_has_aes() else CHACHA


def _crypto(module: str) -> Any:
    # Loaded at first use (as codec.py loads numpy): 20 ms of import that a process never
    # moving bulk data does not pay.
    return importlib.import_module(f"cryptography.{module}")


def _aead(algorithm: str, secret: bytes):
    aead = _crypto("hazmat.primitives.ciphers.aead")
    if algorithm == AES_GCM:
        return aead.AESGCM(secret)
    if algorithm == CHACHA:
        return aead.ChaCha20Poly1305(secret)
    raise BulkError(f"unknown bulk algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")


class ChunkKey:
    """One transfer's key, bound to its id, total size and chunk size (see module doc)."""

    __slots__ = ("algorithm", "_aead", "_secret", "_aad", "tid", "total", "chunk")

    def __init__(self, algorithm: str, secret: bytes, tid: str, total: int, chunk: int):
        if algorithm != PLAIN and (type(secret) is not bytes or len(secret) != KEY_BYTES):
            raise BulkError(f"a {algorithm} key must be {KEY_BYTES} bytes")
        self.algorithm = algorithm
        self._secret = secret if algorithm != PLAIN else b""
        self._aead = _aead(algorithm, secret) if algorithm != PLAIN else None
        self.tid, self.total, self.chunk = tid, total, chunk
        self._aad = b"".join((_AAD_LABEL, tid.encode(), b"\x00", total.to_bytes(8, "big"),
                              chunk.to_bytes(8, "big")))

    @classmethod
    def new(cls, algorithm: str, tid: str, total: int, chunk: int) -> ChunkKey:
        secret = os.urandom(KEY_BYTES) if algorithm != PLAIN else b""
        return cls(algorithm, secret, tid, total, chunk)

    def __repr__(self) -> str:  # never the secret
        return f"ChunkKey({self.algorithm}, tid={self.tid!r})"

    def secret(self) -> bytes:
        """The key bytes, to hand over the CURVE connection (and nowhere else)."""
        return self._secret

    def same_secret(self, other: ChunkKey) -> bool:
        return (self.algorithm, self._secret) == (other.algorithm, other._secret)

    @property
    def overhead(self) -> int:
        """Bytes a sealed chunk has beyond its plaintext."""
        return 0 if self._aead is None else TAG_BYTES

    @property
    def nchunks(self) -> int:
        return -(-self.total // self.chunk) if self.total else 0

    def plain_size(self, k: int) -> int:
        return min(self.chunk, self.total - k * self.chunk)

    def sealed_size(self, k: int) -> int:
        return self.plain_size(k) + self.overhead

    def _nonce_aad(self, k: int) -> tuple[bytes, bytes]:
        index = k.to_bytes(8, "big")
        return b"\x00\x00\x00\x00" + index, self._aad + index

    def seal(self, k: int, plaintext) -> bytes | memoryview:
        """Chunk k as it travels: ciphertext + tag (new bytes), or the plaintext itself."""
        if self._aead is None:
            return plaintext
        nonce, aad = self._nonce_aad(k)
        return self._aead.encrypt(nonce, plaintext, aad)

    def seal_into(self, k: int, plaintext, out: memoryview) -> memoryview:
        """Chunk k sealed into `out` (sealed_size(k) bytes, e.g. a reused buffer); `out`."""
        if self._aead is None:
            _copy(plaintext, out)
            return out
        nonce, aad = self._nonce_aad(k)
        self._aead.encrypt_into(nonce, plaintext, aad, out)
        return out

    def open_into(self, k: int, sealed, out: memoryview) -> None:
        """Authenticate chunk k and write its plaintext into `out` (its place in the
        receiver's buffer); raises BulkError, and then `out` holds nothing to be used."""
        if self._aead is None:
            _copy(sealed, out)
            return
        nonce, aad = self._nonce_aad(k)
        try:
            self._aead.decrypt_into(nonce, sealed, aad, out)
        except _crypto("exceptions").InvalidTag:
            raise BulkError(f"chunk {k} of transfer {self.tid!r} failed authentication "
                            "(changed on the way, or not sealed with this transfer's key)"
                            ) from None
        except ValueError as exc:
            raise BulkError(f"chunk {k} of transfer {self.tid!r}: {exc}") from None


def tag_of(sealed) -> bytes:
    """The tag of a sealed chunk (its last 16 bytes); b"" for plaintext."""
    view = memoryview(sealed)
    return bytes(view[view.nbytes - TAG_BYTES:]) if view.nbytes >= TAG_BYTES else b""


class Tags:
    """The tag of every chunk of one transfer, recorded the first time it is seen here; a
    later seal of the same chunk must match it (module doc: nonce uniqueness)."""

    __slots__ = ("_tags", "_plain")

    def __init__(self, key: ChunkKey):
        self._plain = key.overhead == 0
        self._tags: list[bytes | None] = [None] * (0 if self._plain else key.nchunks)

    def record(self, k: int, sealed) -> None:
        if not self._plain and self._tags[k] is None:
            self._tags[k] = tag_of(sealed)

    def check(self, k: int, sealed) -> None:
        """Record chunk k's tag, or raise BulkError if it differs from the one recorded."""
        if self._plain:
            return
        tag, known = tag_of(sealed), self._tags[k]
        if known is None:
            self._tags[k] = tag
        elif tag != known:
            raise BulkError(f"chunk {k} sealed again came out different: its plaintext "
                            "changed while it was being sent (do not change published "
                            "weights or call arguments in place); not sent")


def _copy(src, out: memoryview) -> None:
    """out[:] = src; with the GIL released (ctypes.memmove) when src is writable, as
    received frames and our own buffers are."""
    view = memoryview(src).cast("B")
    if view.nbytes != out.nbytes:
        raise BulkError(f"a {view.nbytes}-byte chunk for {out.nbytes} bytes")
    if view.readonly or not view.nbytes:
        out[:] = view
        return
    dst = (ctypes.c_char * out.nbytes).from_buffer(out)
    ctypes.memmove(dst, (ctypes.c_char * view.nbytes).from_buffer(view), view.nbytes)
