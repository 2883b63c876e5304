"""Workspace bundles: a directory packed into a deterministic archive named by its sha256,
and a cache of unpacked bundles on the worker. Not transport: bytes in, bytes out.

Packing sorts entries and clears mtimes, owners and gzip headers, so the same tree always
gives the same bytes and the same address; the worker then unpacks each bundle once and
copies it into each attempt's working directory (a task may write into its cwd; the cached
copy must stay pristine). Unpacking refuses absolute paths, `..`, links leaving the tree and
device files (tarfile's "data" filter plus our own member checks), and checks the address
before anything is written.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import re
import shutil
import tarfile
from collections.abc import Iterable
from pathlib import Path

from iris.base.errors import InvalidRequestError
from iris.base.ids import new_id

DEFAULT_EXCLUDE = (".git", "__pycache__", "*.pyc", ".venv", "venv", ".mypy_cache",
                   ".pytest_cache", ".ruff_cache", "node_modules")
DEFAULT_MAX_BYTES = 256 << 20  # a bundle is code and config; data belongs in GCS
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class BundleError(InvalidRequestError):
    """A bundle that cannot be packed or is unsafe or corrupt to unpack."""

    def __init__(self, message: str):
        super().__init__(message, "bundle")


def _excluded(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _walk(root: Path, exclude: tuple[str, ...]) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _excluded(d, exclude))
        base = Path(dirpath)
        found.extend(base / d for d in dirnames)
        found.extend(base / f for f in sorted(filenames) if not _excluded(f, exclude))
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _tarinfo(path: Path, root: Path) -> tarfile.TarInfo:
    rel = path.relative_to(root).as_posix()
    info = tarfile.TarInfo(rel)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    st = path.lstat()
    if path.is_symlink():
        target = os.readlink(path)
        resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
        if os.path.isabs(target) or resolved.startswith(".."):
            raise BundleError(f"bundle: symlink {rel} -> {target} points outside the workspace")
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    elif path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif path.is_file():
        info.size = st.st_size
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    else:
        raise BundleError(f"bundle: {rel} is not a regular file, directory or symlink")
    return info


def pack(root: Path, exclude: tuple[str, ...] = DEFAULT_EXCLUDE,
         max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, bytes]:
    """(sha256 hex digest, archive bytes) of the directory `root`."""
    if not root.is_dir():
        raise BundleError(f"bundle: {root} is not a directory")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(root, exclude):
            info = _tarinfo(path, root)
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
            if buf.tell() > max_bytes:
                raise BundleError(f"bundle: {root} exceeds {max_bytes} bytes compressed")
    data = buf.getvalue()
    return hashlib.sha256(data).hexdigest(), data


def _check_members(tar: tarfile.TarFile) -> None:
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or ".." in Path(name).parts:
            raise BundleError(f"bundle: unsafe path {name!r} in archive (refused)")
        if not (member.isreg() or member.isdir() or member.issym()):
            raise BundleError(f"bundle: {name!r} is not a file, directory or symlink")


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
        if not isinstance(digest, str) or not _DIGEST.match(digest):
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
                _check_members(tar)
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
