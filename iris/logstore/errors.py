"""Errors of the log store: a refused chunk (a zombie writer) and storage failures.

Both fit the tree in iris.base.errors:

    ConflictError
    └── ChunkExistsError        a chunk key already holds other bytes: another writer owns it
    StorageError
    └── LogStorageError         the sink failed; `transient` says whether a retry may succeed
"""

from __future__ import annotations

from iris.base.errors import ConflictError, StorageError


class ChunkExistsError(ConflictError):
    """A create-only chunk write found the key taken by different bytes.

    Chunks are written with `if_generation_match=0`, so this happens only when a second
    writer (a zombie from a lost worker, or a stale attempt) ships under the same attempt.
    """

    def __init__(self, key: str):
        super().__init__(f"log chunk {key!r} already exists with other content: "
                         "another writer is shipping this attempt")
        self.key = key


class LogStorageError(StorageError):
    """The sink could not complete an operation. `transient` errors are worth retrying."""

    def __init__(self, message: str, *, transient: bool):
        super().__init__(message)
        self.transient = transient


__all__ = ["ChunkExistsError", "LogStorageError"]
