"""Which credential owns which worker id, kept across controller restarts: an append-only
file of verifiers (`STATE_DIR/worker_credentials`, 0600). Not the table (credentials.py).

A line is `+ ID SHA256` (a credential issued to ID; the sha256 of its 32 bytes, hex) or
`- ID` (revoked). Only hashes are kept: reading the file gives no credential to present
(a credential is 32 random bytes, so its sha256 cannot be searched back). Replayed at
start: the last `+` of an id not revoked since is held. A torn last line (a kill mid-write)
is skipped.

Durability: each line is written through (a kill -9 of the controller loses none); it is
fsynced at most `SYNC_EVERY_S` later (the sweep's tick), so the loss of the machine itself
loses at most that much of the newest joins: their ids are then free to join, as every id
was after a restart before this file. The file is rewritten whole (a temporary file, then
a rename) once it holds twice the live entries and `_SLACK` more, so it stays within
about 2 x MAX_HELD lines (~10 MB at 50,000 credentials).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from iris.actors import tokens

FILE = tokens.WORKER_CREDENTIALS_FILE
SYNC_EVERY_S = 1.0  # the controller's credential sweep runs this often (actor.py)
_SLACK = 1000  # lines beyond twice the live ones before a rewrite: rewrites stay rare
_HASH_HEX = 64

_log = logging.getLogger(__name__)


def verifier(credential: bytes) -> bytes:
    """What is kept of a credential: its sha256."""
    return hashlib.sha256(credential).digest()


class CredentialLog:
    """The append-only file of one controller's state directory."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / FILE
        self.held, skipped, self._lines = _replay(self.path)
        if skipped:
            _log.warning("%s: %d malformed lines skipped (a write cut short by a crash)",
                         self.path, skipped)
        self._dirty = False
        self._file = _open_append(self.path)

    def issued(self, worker_id: str, digest: bytes) -> None:
        self.held[worker_id] = digest
        self._append(f"+ {worker_id} {digest.hex()}\n")

    def revoked(self, worker_id: str) -> None:
        if self.held.pop(worker_id, None) is not None:
            self._append(f"- {worker_id}\n")

    def sync(self) -> None:
        """Make what was written survive the machine (at most every SYNC_EVERY_S)."""
        if self._dirty:
            self._dirty = False
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self.sync()
        self._file.close()

    def _append(self, line: str) -> None:
        self._file.write(line)
        self._file.flush()  # through to the kernel: a kill -9 loses nothing
        self._dirty = True
        self._lines += 1
        if self._lines > 2 * len(self.held) + _SLACK:
            self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(f"+ {w} {d.hex()}\n" for w, d in self.held.items())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._file.close()
        self._file, self._lines, self._dirty = _open_append(self.path), len(self.held), False


def _open_append(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")  # after a torn last line: the next line starts clean
    return os.fdopen(fd, "a")


def _replay(path: Path) -> tuple[dict[str, bytes], int, int]:
    """(held: id -> verifier, lines skipped, lines read)."""
    held: dict[str, bytes] = {}
    skipped = lines = 0
    try:
        text = path.read_text()
    except FileNotFoundError:
        return held, 0, 0
    for line in text.splitlines(keepends=True):
        lines += 1
        words = line.split()
        if not line.endswith("\n") or not words:
            skipped += 1
        elif words[0] == "+" and len(words) == 3 and len(words[2]) == _HASH_HEX:
            try:
                held[words[1]] = bytes.fromhex(words[2])
            except ValueError:
                skipped += 1
        elif words[0] == "-" and len(words) == 2:
            held.pop(words[1], None)
        else:
            skipped += 1
    return held, skipped, lines


__all__ = ["FILE", "CredentialLog", "verifier"]
