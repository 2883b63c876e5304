"""Per-attempt memory cgroups (v2 `memory.max` or v1 `memory.limit_in_bytes`): no policy.

Iris creates each attempt's cgroup as a child of the worker's own memory cgroup (read from
/proc/self/cgroup), so it needs no rights above where the worker already lives. A cgroup
also tracks every process of an attempt, including ones that left its session, so killing
"everything of an attempt" is exact where cgroups exist. Where they do not, `detect()`
returns None and logs one clear warning: limits are then not enforced.

The child joins its cgroup before any user code runs: the command path execs through
`join_then_exec_argv` (a shell writes its own pid, then execs), the zygote path writes the
pid in the forked child before calling user code.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from iris.base.errors import IrisError
from iris.worker.records import kill_and_wait

_log = logging.getLogger(__name__)
_KILL_ROUNDS = 50  # a fork bomb may add processes while we kill; each round kills the newcomers


class CgroupError(IrisError):
    """Creating, joining or removing an attempt cgroup failed."""


class CgroupVersion(enum.Enum):
    V1 = "v1"
    V2 = "v2"


def _own_cgroup(proc_self_cgroup: str, version: CgroupVersion) -> str | None:
    for line in proc_self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if version is CgroupVersion.V2 and hier == "0" and controllers == "":
            return path
        if version is CgroupVersion.V1 and "memory" in controllers.split(","):
            return path
    return None


@dataclass(frozen=True)
class CgroupHost:
    """Where attempt cgroups go on this host: `parent` is the worker's own memory cgroup."""

    version: CgroupVersion
    parent: Path

    def create(self, name: str, memory_limit_bytes: int = 0) -> AttemptCgroup:
        """A new child cgroup; `memory_limit_bytes` 0 means track only, no limit."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"invalid cgroup name {name!r}")
        path = self.parent / name
        try:
            path.mkdir()
            if memory_limit_bytes > 0:
                self._set_limit(path, memory_limit_bytes)
        except OSError as exc:
            _rmdir_quietly(path)
            raise CgroupError(f"cannot create memory cgroup {path}: {exc}") from exc
        return AttemptCgroup(path=path, version=self.version,
                             memory_limit_bytes=memory_limit_bytes)

    def _set_limit(self, path: Path, limit: int) -> None:
        if self.version is CgroupVersion.V2:
            (path / "memory.max").write_text(str(limit))
            swap = path / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")  # else the limit is dodged by swapping out
            return
        (path / "memory.limit_in_bytes").write_text(str(limit))
        memsw = path / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            memsw.write_text(str(limit))  # memory+swap: the same bound, no escape to swap


@dataclass(frozen=True)
class AttemptCgroup:
    path: Path
    version: CgroupVersion
    memory_limit_bytes: int

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def add(self, pid: int) -> None:
        self.procs_file.write_text(str(pid))

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in self.procs_file.read_text().split()]
        except OSError as exc:
            # Gone: ENOENT, or ENODEV when cgroup v1 removed it while we read (a restarted
            # runner watching the same adopted attempt removed it first).
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                return []
            raise

    def kill_all(self, timeout_s: float = 10.0) -> None:
        """SIGKILL every process in the cgroup and wait until they are gone."""
        for _ in range(_KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                return
            if kill_and_wait(pids, timeout_s):
                return  # stuck in the kernel (state D): retrying would only wait again

    def oom_kills(self) -> int:
        """How many processes the OOM killer ended in this cgroup (0 if unknown)."""
        name = "memory.events" if self.version is CgroupVersion.V2 else "memory.oom_control"
        try:
            text = (self.path / name).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def memory_now(self) -> int | None:
        """Bytes charged to the cgroup now (page cache included), None if unreadable."""
        name = "memory.current" if self.version is CgroupVersion.V2 else "memory.usage_in_bytes"
        return _read_int(self.path / name)

    def memory_peak(self) -> int | None:
        """The most bytes ever charged to it (v1 `max_usage_in_bytes`, v2 `memory.peak`,
        which kernels before 5.19 lack): what its memory limit compared against."""
        name = "memory.peak" if self.version is CgroupVersion.V2 else "memory.max_usage_in_bytes"
        return _read_int(self.path / name)

    def remove(self) -> bool:
        """Remove the (empty) cgroup; False if it still had processes."""
        self.kill_all()
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _rmdir_quietly(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def detect(cgroup_root: Path = Path("/sys/fs/cgroup"),
           proc_self_cgroup: Path = Path("/proc/self/cgroup")) -> CgroupHost | None:
    """This host's memory cgroup support, or None (after a warning) when there is none."""
    try:
        table = proc_self_cgroup.read_text()
    except OSError as exc:
        _log.warning("no cgroups (%s): memory limits will NOT be enforced", exc)
        return None
    for version, base in ((CgroupVersion.V2, cgroup_root),
                          (CgroupVersion.V1, cgroup_root / "memory")):
        host = _try_host(version, base, table)
        if host is not None:
            return host
    _log.warning(
        "no writable memory cgroup (v2 with the memory controller, or v1 memory) under %s: "
        "memory limits will NOT be enforced and escaped processes cannot be tracked",
        cgroup_root,
    )
    return None


def _try_host(version: CgroupVersion, base: Path, table: str) -> CgroupHost | None:
    own = _own_cgroup(table, version)
    if own is None:
        return None
    parent = base / own.lstrip("/")
    if version is CgroupVersion.V2:
        controllers = base / "cgroup.controllers"
        if not controllers.exists() or "memory" not in controllers.read_text().split():
            return None
        if not _enable_v2_memory(parent):
            return None
    elif not (parent / "memory.limit_in_bytes").exists():
        return None
    if not os.access(parent, os.W_OK):
        return None
    return CgroupHost(version=version, parent=parent)


def _enable_v2_memory(parent: Path) -> bool:
    """v2 needs `+memory` in the parent's subtree_control before children get memory.max."""
    subtree = parent / "cgroup.subtree_control"
    try:
        if "memory" in subtree.read_text().split():
            return True
        subtree.write_text("+memory")
        return True
    except OSError as exc:
        # v2's "no internal processes" rule refuses this while the worker sits in `parent`.
        _log.warning("cgroup v2: cannot enable memory for children of %s: %s", parent, exc)
        return False


def join_then_exec_argv(procs_file: Path, argv: list[str]) -> list[str]:
    """argv that joins the cgroup (writes its own pid) and then execs `argv`: no race, as
    the pid is written before the target program starts."""
    # The shell's own error would name the cgroup's path, which means nothing to the task's
    # owner (issue 18): say what failed instead.
    script = ('{ echo $$ > "$0"; } 2>/dev/null || '
              '{ echo "iris: cannot join the attempt\'s memory cgroup" >&2; exit 125; }; '
              'exec "$@"')
    return ["/bin/sh", "-c", script, str(procs_file), *argv]
