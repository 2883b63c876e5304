"""The worker's cache of unpacked workspace bundles (the format is wire/bundles.py).

Each bundle is unpacked once and copied into each attempt's working directory: a task may
write into its cwd, and the cached copy must stay pristine.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

from iris.base.ids import new_id
from iris.wire.bundles import DIGEST, BundleError, check_members


class BundleCache:
    """Unpacked bundles under `root`, one directory per digest."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path_for(self, digest: str) -> Path | None:
        path = self.root / self._checked(digest)
        return path if path.is_dir() else None

    @staticmethod
    def _checked(digest: str) -> str:
        if not isinstance(digest, str) or not DIGEST.match(digest):
            raise BundleError(f"bundle: {digest!r} is not a sha256 hex digest")
        return digest

    def unpack(self, digest: str, data: bytes) -> Path:
        """Verify `data` hashes to `digest`, unpack it once; the cached directory."""
        final = self.root / self._checked(digest)
        if final.is_dir():
            return final
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise BundleError(f"bundle: content hashes to {actual}, not {digest} (corrupt)")
        tmp = self.root / f".tmp-{new_id()}"
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                check_members(tar)
                tar.extractall(tmp, filter="data")
            os.rename(tmp, final)  # atomic; if another unpack won the race, keep theirs
        except (tarfile.TarError, EOFError, OSError) as exc:
            if final.is_dir():
                return final
            raise BundleError(f"bundle {digest[:12]}: cannot unpack: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def materialize(self, digest: str, dest: Path) -> Path:
        """Copy the unpacked bundle into `dest` (an attempt's fresh working directory)."""
        source = self.path_for(digest)
        if source is None:
            raise BundleError(f"bundle {digest[:12]} is not in the cache; unpack it first")
        shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
        return dest
