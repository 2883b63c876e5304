"""Workspace bundles the controller holds for workers: content-addressed files. No decisions.

A client uploads a packed directory once (its sha256 names it, so the same workspace is
never stored or sent twice); workers fetch it by digest when an attempt needs it and keep
their own unpacked copy. Stored beside the job database, so it survives a restart.

Any client may upload, so the store is bounded and reclaimed (docs/architecture.md,
Per-peer state): at most `max_total_bytes` in all (an upload past it is refused for load,
`overloaded`), and a bundle that no live job names and that nobody uploaded for IDLE_S
is deleted (`reclaim`, from the controller's tick; a client whose bundle went
uploads it again at its next submit, as `has_bundle` says no).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Container
from pathlib import Path

from iris.base.errors import InvalidRequestError, NotFoundError, OverloadedError

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# A workspace is code and small data; model weights belong in object storage.
MAX_BUNDLE_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 32 * 1024 ** 3  # every bundle held: 128 of the largest
# A bundle no live job names is kept this long after its last upload: the time
# between a client's upload and its submit, and a finished job's resubmit, with room.
IDLE_S = 24 * 3600.0


class BundleStore:
    def __init__(self, root: Path, max_total_bytes: int = MAX_TOTAL_BYTES):
        self.root = root
        self.max_total_bytes = max_total_bytes
        root.mkdir(parents=True, exist_ok=True)
        self._total = sum(p.stat().st_size for p in self._files())

    def _files(self) -> list[Path]:
        return [p for p in self.root.glob("*.tar.gz") if _DIGEST.match(p.name[:-7])]

    def _path(self, digest: str) -> Path:
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise InvalidRequestError(f"bundle: not a sha256 hex digest: {digest!r}", "bundle")
        return self.root / f"{digest}.tar.gz"

    def has(self, digest: str) -> bool:
        """Held (and then wanted again: its idle time starts over, so that a client told
        yes may submit a job naming it)."""
        try:
            os.utime(self._path(digest))
        except FileNotFoundError:
            return False
        return True

    def put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        if len(data) > MAX_BUNDLE_BYTES:
            raise InvalidRequestError(f"bundle: {len(data)} bytes is over the "
                                      f"{MAX_BUNDLE_BYTES} byte limit", "bundle")
        if hashlib.sha256(data).hexdigest() != digest:
            raise InvalidRequestError("bundle: the data does not hash to its digest", "bundle")
        if path.exists():
            os.utime(path)  # wanted again: its idle time starts over
            return
        if self._total + len(data) > self.max_total_bytes:
            raise OverloadedError(
                f"bundle: the controller holds {self._total} bytes of bundles, and "
                f"{len(data)} more is over its {self.max_total_bytes} byte bound; bundles "
                f"no live job names are deleted after {IDLE_S / 3600:g} h idle",
                retry_after_s=60.0)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._total += len(data)

    def reclaim(self, keep: Container[str], now: float | None = None) -> list[str]:
        """Delete the bundles not in `keep` (those live jobs name) whose last upload is
        IDLE_S old; the digests deleted."""
        cutoff = (time.time() if now is None else now) - IDLE_S
        gone = []
        for path in self._files():
            digest = path.name[:-7]
            try:
                st = path.stat()
                if digest in keep or st.st_mtime > cutoff:
                    continue
                path.unlink()
            except FileNotFoundError:
                continue
            self._total -= st.st_size
            gone.append(digest)
        return sorted(gone)

    def get(self, digest: str) -> bytes:
        path = self._path(digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"no bundle {digest[:12]} on the controller") from None
