"""Fast starts for callable tasks: a pre-forked, pre-imported interpreter per environment
(the zygote) and the spawners AttemptProcess uses. Not the process lifecycle (process.py).

A fresh `python` needs tens of milliseconds to start and import cloudpickle before user
code runs; Ray needed 342 ms here for a new actor process. The zygote pays that once per
environment: each attempt is a fork() of an interpreter that already imported the runtime,
followed by setsid, joining the cgroup, and the attempt's env and cwd (see zygote_main).

`subprocess_callable_spawner` is the plain path (a new interpreter per attempt), used when
no zygote runs for the environment or for a bench comparison.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from iris.base.errors import IrisError
from iris.worker.cgroups import AttemptCgroup
from iris.worker.process import AttemptSpec, AttemptStartError, Leader, PidfdLeader, Spawner

_log = logging.getLogger(__name__)
_MAX_PACKET = 1 << 20
_READY_TIMEOUT_S = 60.0  # importing the runtime on a loaded 2-core box; normally ~0.1 s
_SPAWN_TIMEOUT_S = 30.0  # a fork answers in milliseconds; this only bounds a wedged zygote
PAYLOAD_NAME = "payload.pkl"
_RUN_PAYLOAD = "import sys; from iris.worker.task_runtime import main; sys.exit(main())"


class ZygoteError(IrisError):
    """The zygote is not running or did not answer."""


def _write_payload(spec: AttemptSpec, payload: bytes) -> Path:
    path = spec.attempt_dir / PAYLOAD_NAME
    path.write_bytes(payload)
    return path


def subprocess_callable_spawner(python: str | Path, payload: bytes) -> Spawner:
    """Run a cloudpickled (fn, args, kwargs) in a new interpreter of `python`."""
    from iris.worker.process import popen_spawner

    def spawn(spec: AttemptSpec, out_fd: int, err_fd: int, cg: AttemptCgroup | None) -> Leader:
        path = _write_payload(spec, payload)
        # Not `-m iris.worker.task_runtime`: `import iris` imports that module first, so
        # runpy ran a second copy as __main__ and warned on every task's stderr.
        argv = [str(python), "-c", _RUN_PAYLOAD, str(path)]
        return popen_spawner(argv)(spec, out_fd, err_fd, cg)

    return spawn


class _ZygoteLeader:
    """An attempt forked by a zygote: the zygote reports its exit status to us."""

    def __init__(self, pid: int):
        self.pid = pid
        self._done = threading.Event()
        self._returncode: int | None = None
        self._lost = False
        self.rusage: tuple[float, int] | None = None  # (CPU s, max RSS bytes), from wait4

    def _finish(self, returncode: int | None, lost: bool = False,
                rusage: tuple[float, int] | None = None) -> None:
        self._returncode, self._lost, self.rusage = returncode, lost, rusage
        self._done.set()

    def wait_returncode(self) -> int | None:
        self._done.wait()
        if self._lost:  # the zygote died first: we can still see the end, not the status
            return PidfdLeader(self.pid).wait_returncode()
        return self._returncode


class Zygote:
    """One zygote process for one environment's interpreter. Thread-safe."""

    def __init__(self, python: str | Path, env: Mapping[str, str],
                 preload: Sequence[str] = (), cwd: Path | None = None,
                 spawn_timeout_s: float = _SPAWN_TIMEOUT_S):
        self.python = str(python)
        self._spawn_timeout_s = spawn_timeout_s
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [self.python, "-P", "-m", "iris.worker.zygote_main", str(child.fileno()),
                 *preload],
                pass_fds=(child.fileno(),), env=dict(env), cwd=cwd or "/",
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        finally:
            child.close()
        self._sock = parent
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, list] = {}  # request id -> [event, reply]
        self._leaders: dict[int, _ZygoteLeader] = {}
        # (code, rusage) of exits that overtook their "started" reply
        self._early_exits: dict[int, tuple] = {}
        self._closed = False
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name="iris-zygote-reader")
        self._reader.start()
        if not self._ready.wait(_READY_TIMEOUT_S) or self._closed:
            self.close()
            raise ZygoteError(f"zygote for {self.python} did not start "
                              f"(exit code {self._proc.poll()})")

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None

    def spawner(self, payload: bytes) -> Spawner:
        """A Spawner that forks the attempt from this zygote."""

        def spawn(spec: AttemptSpec, out_fd: int, err_fd: int, cg: AttemptCgroup | None
                  ) -> Leader:
            path = _write_payload(spec, payload)
            return self._spawn({"payload_path": str(path), "env": spec.runtime_env(),
                                "cwd": str(spec.cwd), "attempt_dir": str(spec.attempt_dir),
                                "cgroup_procs": str(cg.procs_file) if cg else None},
                               [out_fd, err_fd])

        return spawn

    def _spawn(self, request: dict, fds: list[int]) -> Leader:
        event = threading.Event()
        with self._lock:
            if self._closed:
                raise AttemptStartError(f"zygote for {self.python} is not running")
            self._next_id += 1
            rid = self._next_id
            slot = self._pending[rid] = [event, None]
            try:
                socket.send_fds(self._sock, [pickle.dumps({"op": "spawn", "id": rid,
                                                           **request})], fds)
            except OSError as exc:
                del self._pending[rid]
                raise AttemptStartError(f"zygote for {self.python}: {exc}") from exc
        if not event.wait(self._spawn_timeout_s) or slot[1] is None:
            self._discard()
            raise AttemptStartError(f"zygote for {self.python} did not answer a spawn")
        reply = slot[1]
        if reply["op"] != "started":
            raise AttemptStartError(f"zygote: {reply.get('error')}")
        return self._leader_for(reply["pid"])

    def _leader_for(self, pid: int) -> _ZygoteLeader:
        with self._lock:
            leader = _ZygoteLeader(pid)
            if pid in self._early_exits:
                returncode, rusage = self._early_exits.pop(pid)
                leader._finish(returncode, rusage=rusage)
            elif self._closed:
                leader._finish(None, lost=True)
            else:
                self._leaders[pid] = leader
            return leader

    def _read_loop(self) -> None:
        try:
            while True:
                data = self._sock.recv(_MAX_PACKET)
                if not data:
                    break
                self._dispatch(pickle.loads(data))
        except OSError:
            pass
        finally:
            self._lost()

    def _dispatch(self, msg: dict) -> None:
        with self._lock:
            if msg["op"] == "ready":
                self._ready.set()
            elif msg["op"] == "exited":
                leader = self._leaders.pop(msg["pid"], None)
                rusage = tuple(msg["rusage"]) if msg.get("rusage") else None
                if leader is None:
                    self._early_exits[msg["pid"]] = (msg["returncode"], rusage)
                else:
                    leader._finish(msg["returncode"], rusage=rusage)
            elif msg.get("id") in self._pending:
                slot = self._pending.pop(msg["id"])
                slot[1] = msg
                slot[0].set()

    def _discard(self) -> None:
        """A zygote that did not answer (stopped, wedged) is killed: the pool starts another
        for the next attempt, and one resumed later never forks the attempt it was asked for
        and that failed meanwhile. Before, a SIGSTOPped zygote failed every callable attempt
        of its environment after 30 s each, for as long as it was stopped."""
        _log.warning("zygote %s for %s did not answer a spawn in %.0f s: killing it",
                     self._proc.pid, self.python, self._spawn_timeout_s)
        with self._lock:
            self._closed = True
        self._proc.kill()  # a stopped process dies of SIGKILL too

    def _lost(self) -> None:
        with self._lock:
            self._closed = True
            for leader in self._leaders.values():
                leader._finish(None, lost=True)
            self._leaders.clear()
            for slot in self._pending.values():
                slot[0].set()
            self._pending.clear()
        self._ready.set()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the zygote (its attempts run on; stop them through their AttemptProcess)."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout_s)
        self._sock.close()


class ZygotePool:
    """One zygote per environment python, started on first use, replaced when it died."""

    def __init__(self, base_env: Mapping[str, str], preload: Sequence[str] = (),
                 spawn_timeout_s: float = _SPAWN_TIMEOUT_S):
        self._base_env = dict(base_env)
        self._preload = tuple(preload)
        self._spawn_timeout_s = spawn_timeout_s
        self._lock = threading.Lock()
        self._zygotes: dict[str, Zygote] = {}

    def get(self, python: str | Path) -> Zygote:
        with self._lock:
            zygote = self._zygotes.get(str(python))
            if zygote is None or not zygote.alive:
                if zygote is not None:
                    zygote.close()
                zygote = self._zygotes[str(python)] = Zygote(
                    python, self._base_env, self._preload,
                    spawn_timeout_s=self._spawn_timeout_s)
            return zygote

    def close(self) -> None:
        with self._lock:
            zygotes, self._zygotes = list(self._zygotes.values()), {}
        for zygote in zygotes:
            zygote.close()


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
