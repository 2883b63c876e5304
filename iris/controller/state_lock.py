"""One controller per state directory: an flock held for the controller's life, naming it.

Not the checkpoint prefix's owner (checkpoint/ownership.py: across machines, through GCS).
Two controllers on one SQLite store would each think their jobs the truth; the second one
is refused before it changes anything (no restore, no checkpoint lease, no socket), with one
line naming the first's pid and address. `STATE_DIR/controller.lock` holds the lock, and in
it {"pid", "address", "started_at"} of the holder, which the CLI reads (`iris cluster
status`, `stop`: cluster_dir.py). The kernel drops the lock when the process dies however
it dies (kill -9 included), so a stale file never blocks a restart.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import ConfigError, ConflictError

LOCK_NAME = "controller.lock"
# A reader (`holder`) takes the lock shared for microseconds: a start that meets it tries
# again this many times, this far apart, before it believes a controller holds the dir.
_TRIES, _RETRY_S = 5, 0.02


@dataclass(frozen=True)
class Holder:
    """The controller holding a state directory."""

    pid: int
    address: str  # "" until its socket is bound
    started_at: float  # wall seconds

    def describe(self) -> str:
        return f"pid {self.pid}" + (f" at {self.address}" if self.address else "")


class StateDirLock:
    """Held from `take` until `release` (or the process's end)."""

    def __init__(self, path: Path, fd: int, holder: Holder):
        self.path, self._fd, self.holder = path, fd, holder
        self._made_dir = False

    @classmethod
    def take(cls, state_dir: Path, started_at: float) -> StateDirLock:
        """ConflictError naming the live controller that holds `state_dir`."""
        state_dir = Path(state_dir)
        made = not state_dir.exists()
        path = state_dir / LOCK_NAME
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # an operator's path: one line, not a traceback
            raise ConfigError(f"state dir {state_dir}: {exc.strerror}") from exc
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise ConfigError(f"state dir {state_dir}: cannot open {LOCK_NAME}: "
                                  f"{exc.strerror}") from exc
            try:
                _flock(fd, state_dir)
            except BaseException:
                os.close(fd)
                if made:
                    _rmdir_if_empty(state_dir)
                raise
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break  # else a holder released (and removed) it meanwhile: again
            except FileNotFoundError:
                pass
            os.close(fd)
        lock = cls(path, fd, Holder(os.getpid(), "", started_at))
        lock._made_dir = made
        lock._write()
        return lock

    def note_address(self, address: str) -> None:
        self.holder = Holder(self.holder.pid, address, self.holder.started_at)
        self._write()

    def release(self) -> None:
        """Gone as if never taken: the file is removed while still locked (a controller that
        waits for it finds it gone and makes its own), and the directory if it made it and
        nothing else was put there (a refused start changes nothing)."""
        if self._fd >= 0:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = -1
            if self._made_dir:
                _rmdir_if_empty(self.path.parent)

    def _write(self) -> None:
        data = json.dumps(asdict(self.holder)).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


def _flock(fd: int, state_dir: Path) -> None:
    for attempt in range(_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt + 1 < _TRIES:  # a reader's probe (`holder`) holds it microseconds
                SYSTEM_CLOCK.sleep(_RETRY_S)
    other = _parse(os.pread(fd, 4096, 0))
    who = other.describe() if other else "another controller"
    raise ConflictError(f"state dir {state_dir} is in use by the controller {who}: stop it "
                        "first (or give this one its own --state-dir)")


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def holder(state_dir: Path) -> Holder | None:
    """The live controller holding `state_dir`, or None (nobody: the lock is free)."""
    path = Path(state_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _parse(os.pread(fd, 4096, 0)) or Holder(0, "", 0.0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _parse(data: bytes) -> Holder | None:
    try:
        raw = json.loads(data)
        return Holder(int(raw["pid"]), str(raw.get("address", "")),
                      float(raw.get("started_at", 0.0)))
    except (ValueError, TypeError, KeyError):
        return None


__all__ = ["LOCK_NAME", "Holder", "StateDirLock", "holder"]
