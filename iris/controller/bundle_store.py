"""Workspace bundles the controller holds for workers: content-addressed files. No decisions.

A client uploads a packed directory once (its sha256 names it, so the same workspace is
never stored or sent twice); workers fetch it by digest when an attempt needs it and keep
their own unpacked copy. Stored beside the job database, so it survives a restart.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from iris.base.errors import InvalidRequestError, NotFoundError

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# A workspace is code and small data; model weights belong in object storage.
MAX_BUNDLE_BYTES = 256 * 1024 * 1024


class BundleStore:
    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str) -> Path:
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise InvalidRequestError(f"bundle: not a sha256 hex digest: {digest!r}", "bundle")
        return self.root / f"{digest}.tar.gz"

    def has(self, digest: str) -> bool:
        return self._path(digest).exists()

    def put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        if len(data) > MAX_BUNDLE_BYTES:
            raise InvalidRequestError(f"bundle: {len(data)} bytes is over the "
                                      f"{MAX_BUNDLE_BYTES} byte limit", "bundle")
        if hashlib.sha256(data).hexdigest() != digest:
            raise InvalidRequestError("bundle: the data does not hash to its digest", "bundle")
        if path.exists():
            return
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def get(self, digest: str) -> bytes:
        path = self._path(digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"no bundle {digest[:12]} on the controller") from None
