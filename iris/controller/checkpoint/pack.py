"""Packing a checkpoint: the niced child process archive.pack_in_child starts, and what it runs.

Only the standard library: the child imports this module and nothing of the controller, the
actor runtime or the wire (those cost ~0.2 CPU-s per checkpoint before the first page was
copied). What the archive holds, and its names, are archive.py's: it passes them in.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import stat
import sys
import tarfile
from pathlib import Path
from typing import Any

FORMAT = 1  # of the archive and manifest; bump when either changes shape
# gzip level 6 (zlib's default): SQLite pages of JSON records shrink ~8x; level 1 was
# ~30% larger for ~40% less CPU, and the upload, not the CPU, is what a big state waits on.
COMPRESS_LEVEL = 6
CHUNK = 1 << 20
# The copy and compression run in a child process at this niceness: measured at 10,000
# jobs on a loaded 2-core machine, packing on a thread of the controller raised submit p50
# from 10 to 49 ms (GIL hand-offs around tarfile's small writes, and CPU); in a child it
# shares no GIL, and the kernel serves the controller first when cores are short.
CHILD_NICE = 10


def pack(db_path: Path, state_dir: Path, out: Path, name: str, taken_at: float,
         members: tuple[str, ...]) -> dict:
    """Write the archive of the store at `db_path` (as `members[0]`; + the files `members[1:]`
    of `state_dir` that exist) to `out`; return its manifest.

    The copy is made in memory, not on disk: 25 MB of copy written beside the live store
    (10,000 jobs) slowed the controller's fsync per commit while it lasted. The child holds
    the database twice at its peak (the copy, then its image: ~510 MB at 100,000 jobs) and
    once while it compresses."""
    image, facts = _backup(db_path)
    with tarfile.open(out, "w:gz", compresslevel=COMPRESS_LEVEL) as tar:
        info = tarfile.TarInfo(members[0])
        info.size, info.mtime, info.mode = len(image), int(taken_at), 0o600
        tar.addfile(info, _ImageReader(image))
        for token in members[1:]:
            data = _file_bytes(state_dir / token)
            if data is not None:
                info = tarfile.TarInfo(token)
                info.size, info.mtime, info.mode = len(data), int(taken_at), 0o600
                tar.addfile(info, io.BytesIO(data))
    return {"format": FORMAT, "name": name, "taken_at": taken_at, **facts,
            "db_bytes": len(image), "bytes": out.stat().st_size, "sha256": sha256(out)}


def _file_bytes(path: Path) -> bytes | None:
    """A small state file's content, read once (a file replaced meanwhile is one version or
    the other, whole); None if it does not exist. A symlink is followed and its target's
    bytes kept; what is not a regular file (a directory, a FIFO) fails the pack, naming it:
    tar.add would archive it as such, and unpack refuses such a checkpoint at restore."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the pack
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file: it cannot be checkpointed")
        chunks = []
        while chunk := os.read(fd, CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _backup(db_path: Path) -> tuple[bytes, dict[str, Any]]:
    """The database as one consistent image, and what the manifest says of it."""
    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    dst = sqlite3.connect(":memory:")
    try:
        src.backup(dst)  # pages=-1: every page in one step, one consistent read snapshot
        src.close()
        version = int(dst.execute("SELECT value FROM meta WHERE key = 'schema_version'")
                      .fetchone()[0])
        seq = dst.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
        by_state = dict(dst.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"))
        image = dst.serialize()
    finally:
        dst.close()
        src.close()
    return image, {"schema_version": version, "seq": seq, "jobs": sum(by_state.values()),
                   "jobs_by_state": by_state}


class _ImageReader:
    """Reads a database image for tarfile without copying it, with header bytes 18-19 set
    to 1: they say WAL (2), copied from the live file, and 1 (rollback journal) is what
    `PRAGMA journal_mode = DELETE` writes, so the restored file is whole without a -wal
    beside it (sqlite.org/fileformat2.html, "File format version numbers")."""

    def __init__(self, image: bytes):
        self._view = memoryview(image)
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n < 0 else min(self._pos + n, len(self._view))
        chunk = bytes(self._view[self._pos:end])
        if self._pos < 20 and end > 18:  # the chunk holds byte 18 or 19
            patched = bytearray(chunk)
            for offset in (18, 19):
                if self._pos <= offset < end:
                    patched[offset - self._pos] = 1
            chunk = bytes(patched)
        self._pos = end
        return chunk


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":  # pack_in_child's child: args db state_dir out name taken_at members...
    os.nice(CHILD_NICE)
    _db, _state, _out, _name, _at, *_members = sys.argv[1:]
    print(json.dumps(pack(Path(_db), Path(_state), Path(_out), _name, float(_at),
                          tuple(_members))))
