"""The workspace bundle format: a directory packed into a deterministic archive named by its
sha256, and the member checks every unpacker applies. Not transport (bytes in, bytes out),
and not the worker's cache of unpacked bundles (worker/bundle_cache.py).

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
import tarfile
from collections.abc import Iterable
from pathlib import Path

from iris.base.errors import InvalidRequestError

DEFAULT_EXCLUDE = (".git", "__pycache__", "*.pyc", ".venv", "venv", ".mypy_cache",
                   ".pytest_cache", ".ruff_cache", "node_modules")
DEFAULT_MAX_BYTES = 256 << 20  # a bundle is code and config; data belongs in GCS
DIGEST = re.compile(r"^[0-9a-f]{64}$")


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


def check_members(tar: tarfile.TarFile) -> None:
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or ".." in Path(name).parts:
            raise BundleError(f"bundle: unsafe path {name!r} in archive (refused)")
        if not (member.isreg() or member.isdir() or member.issym()):
            raise BundleError(f"bundle: {name!r} is not a file, directory or symlink")
