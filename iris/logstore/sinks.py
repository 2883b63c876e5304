"""Where log chunks are stored: the `LogSink` interface and the local-directory sink.

Not the GCS sink (iris.logstore.gcs), not the encoding (iris.logstore.model). Keys are
'/'-separated paths relative to the sink's own root; the sink never interprets them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from iris.base.errors import InvalidRequestError, NotFoundError
from iris.base.ids import new_id
from iris.logstore.errors import ChunkExistsError, LogStorageError

MAX_COMPOSE_SOURCES = 32
"""GCS composes at most 32 source objects per request; more are composed in rounds."""

_TMP_PREFIX = ".tmp-"


class LogSink(Protocol):
    def put_chunk(self, key: str, data: bytes) -> None:
        """Create `key` holding `data`, only if it does not exist.

        Writing the same bytes again succeeds (a retried upload whose first try landed);
        different bytes raise ChunkExistsError (a zombie writer).
        """

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        """Every key starting with `prefix` and sorting after `start_after`, in key order."""

    def list_dirs(self, prefix: str) -> list[str]:
        """The 'directories' directly below `prefix` (which ends in '/'), each ending in '/'."""

    def get(self, key: str) -> bytes:
        """The bytes of `key`; NotFoundError if it does not exist."""

    def compose(self, dest: str, sources: list[str]) -> None:
        """Write `dest` as the concatenation of `sources` (any number), replacing `dest`."""

    def delete(self, keys: Iterable[str]) -> None:
        """Delete `keys`; missing ones are ignored."""


def check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts[:-1]) \
            or parts[-1] in (".", ".."):
        raise InvalidRequestError(f"invalid log store key {key!r}", field="key")
    return key


class LocalDirSink:
    """Chunks as files under a directory: the embedded default, and a test double for GCS.

    Create-only writes go to a temp file, are fsynced, then hard-linked to their name, so a
    reader never sees a partial chunk and a second writer's link fails like GCS's 412.
    """

    def __init__(self, root: str | os.PathLike[str]):
        self._root = Path(root)
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogStorageError(f"cannot create log directory {self._root}: {exc}",
                                  transient=False) from exc

    @property
    def root(self) -> Path:
        return self._root

    def _path(self, key: str) -> Path:
        return self._root / check_key(key)

    def put_chunk(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._write_temp(path.parent, [data])
            try:
                os.link(tmp, path)
            except FileExistsError:
                if path.read_bytes() != data:
                    raise ChunkExistsError(key) from None
            finally:
                os.unlink(tmp)
            _fsync_dir(path.parent)
        except OSError as exc:
            raise LogStorageError(f"cannot write log chunk {path}: {exc}", transient=True) from exc

    def _write_temp(self, directory: Path, parts: Iterable[bytes]) -> Path:
        tmp = directory / f"{_TMP_PREFIX}{new_id()}"
        with open(tmp, "xb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = self._root / base if base else self._root
        keys = []
        for dirpath, _dirs, files in os.walk(top):
            rel_dir = Path(dirpath).relative_to(self._root).as_posix()
            for name in files:
                if name.startswith(_TMP_PREFIX):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix) and (start_after is None or key > start_after):
                    keys.append(key)
        return sorted(keys)

    def list_dirs(self, prefix: str) -> list[str]:
        top = self._root / prefix if prefix else self._root
        try:
            names = [e.name for e in os.scandir(top) if e.is_dir()]
        except FileNotFoundError:
            return []
        return sorted(f"{prefix}{name}/" for name in names)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFoundError(f"no log object {key!r} under {self._root}") from None
        except OSError as exc:
            raise LogStorageError(f"cannot read {key!r}: {exc}", transient=True) from exc

    def compose(self, dest: str, sources: list[str]) -> None:
        path = self._path(dest)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._write_temp(path.parent, (self.get(s) for s in sources))
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except OSError as exc:
            raise LogStorageError(f"cannot compose {dest!r}: {exc}", transient=True) from exc

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                self._path(key).unlink()
            except FileNotFoundError:
                pass


def _fsync_dir(directory: Path) -> None:
    """Make a new name durable: without this a power loss can forget a linked chunk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compose_rounds(dest: str, sources: list[str], limit: int = MAX_COMPOSE_SOURCES
                   ) -> list[tuple[str, list[str]]]:
    """The compose calls that build `dest` from `sources` with at most `limit` per call.

    Sources are grouped into temporaries `{dest}.compose/{round}/{i}` until one call can
    finish; the caller runs the steps in order and then deletes the temporaries (every
    step's destination except the last).
    """
    if not sources:
        raise InvalidRequestError("compose needs at least one source", field="sources")
    steps: list[tuple[str, list[str]]] = []
    level, round_no = list(sources), 0
    while len(level) > limit:
        nxt = []
        for i in range(0, len(level), limit):
            tmp = f"{dest}.compose/{round_no}/{i // limit:06d}"
            steps.append((tmp, level[i:i + limit]))
            nxt.append(tmp)
        level, round_no = nxt, round_no + 1
    steps.append((dest, level))
    return steps
