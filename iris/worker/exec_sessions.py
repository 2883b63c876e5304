"""`iris task exec`: commands run beside a live attempt, in its environment, their output
kept for the caller to fetch. Blocking, thread-safe; not the actor (inspector.py).

A session's process gets the attempt's own environment (its venv on PATH, its variables,
its named ports), its working directory and its memory cgroup, so it sees what the task
sees and counts against the task's memory; it is killed with the attempt. Output is kept
(each stream in the order written; across the two as their readers got them, as with ssh)
until the caller acknowledges it: `poll(cursor)` returns what follows byte `cursor` and
forgets what precedes it, so a poll whose answer was lost is asked again with the same
cursor and loses nothing.

Bounds and reclaim (DESIGN): at most MAX_SESSIONS per worker; at most MAX_BUFFER bytes
unacknowledged per session (past it the readers wait, and so does the command's next
write); a session nobody polled for IDLE_S is killed and dropped, as is one whose attempt
ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError, NotFoundError, OverloadedError
from iris.worker.cgroups import join_then_exec_argv
from iris.worker.process import AttemptProcess, check_program

MAX_SESSIONS = 16  # a person debugging opens a few; 16 bounds a script gone wrong
MAX_BUFFER = 4 << 20  # unread output held per session before the command is made to wait
IDLE_S = 60.0  # a caller that stopped polling (Ctrl-C lost, machine gone) for this long
_KILL_GRACE_S = 2.0
_CHUNK = 64 << 10


@dataclass(frozen=True)
class Output:
    chunks: list[tuple[str, bytes]]  # (stream, data), in the order read
    cursor: int  # bytes delivered so far, this answer included
    exit_code: int | None  # set once the command ended and all its output is in `chunks`


class ExecSession:
    """One command. Its two reader threads append output; `poll` hands it out."""

    def __init__(self, session_id: str, attempt_id: str, argv: list[str],
                 proc: AttemptProcess, clock: Clock):
        self.session_id, self.attempt_id = session_id, attempt_id
        self._clock = clock
        self._cond = threading.Condition()
        self._chunks: list[tuple[str, bytes]] = []
        self._base = 0  # offset of self._chunks[0]
        self._size = 0  # bytes held
        self._open_streams = 2
        self.polled_at = clock.monotonic()
        spec = proc.spec
        check_program(argv[0], spec)
        cg = proc.cgroup
        self._popen = subprocess.Popen(
            join_then_exec_argv(cg.procs_file, argv) if cg else argv, cwd=spec.cwd,
            env=spec.runtime_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        for name, pipe in (("stdout", self._popen.stdout), ("stderr", self._popen.stderr)):
            threading.Thread(target=self._read, args=(name, pipe), daemon=True,
                             name=f"iris-exec-{session_id[:8]}-{name}").start()

    def _read(self, stream: str, pipe) -> None:
        try:
            while data := os.read(pipe.fileno(), _CHUNK):
                with self._cond:
                    while self._size >= MAX_BUFFER and self._popen.returncode is None:
                        self._cond.wait(1.0)  # back-pressure until the caller reads
                    self._chunks.append((stream, data))
                    self._size += len(data)
                    self._cond.notify_all()
        finally:
            pipe.close()
            self._popen.wait()
            with self._cond:
                self._open_streams -= 1
                self._cond.notify_all()

    def poll(self, cursor: int, wait_s: float) -> Output:
        """Output after byte `cursor` (what precedes it is forgotten), waiting up to
        `wait_s` for some when there is none yet."""
        with self._cond:
            self.polled_at = self._clock.monotonic()
            self._forget(cursor)
            if not self._chunks and self._open_streams:
                self._cond.wait(wait_s)
            self.polled_at = self._clock.monotonic()
            end = self._base + self._size
            done = not self._open_streams
            return Output(list(self._chunks), end, self._popen.returncode if done else None)

    def _forget(self, cursor: int) -> None:
        """Drop what the caller has (up to `cursor`), splitting a chunk if need be."""
        if cursor < self._base:
            raise InvalidRequestError(f"cursor {cursor} is before the output still held "
                                      f"(from byte {self._base})", "cursor")
        while self._chunks and self._base + len(self._chunks[0][1]) <= cursor:
            stream, data = self._chunks.pop(0)
            self._base += len(data)
            self._size -= len(data)
        if self._chunks and cursor > self._base:
            stream, data = self._chunks[0]
            cut = cursor - self._base
            self._chunks[0] = (stream, data[cut:])
            self._base, self._size = cursor, self._size - cut
        self._cond.notify_all()

    @property
    def done(self) -> bool:
        with self._cond:
            return not self._open_streams

    def kill(self) -> None:
        """SIGTERM its process group, SIGKILL after a short grace."""
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self._popen.pid, signum)
            except (ProcessLookupError, PermissionError):
                return
            try:
                self._popen.wait(_KILL_GRACE_S)
                return
            except subprocess.TimeoutExpired:
                continue


class ExecSessions:
    """This worker's sessions (see the module docstring for bounds)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK):
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, ExecSession] = {}

    def start(self, session_id: str, attempt_id: str, argv: list[str],
              proc: AttemptProcess) -> None:
        if not argv:
            raise InvalidRequestError("argv: give the command to run", "argv")
        with self._lock:
            if session_id in self._sessions:
                return  # a start sent again: it runs already
            if len(self._sessions) >= MAX_SESSIONS:
                raise OverloadedError(f"this worker runs {MAX_SESSIONS} exec sessions "
                                      "already: wait for one to end", retry_after_s=5.0)
            self._sessions[session_id] = ExecSession(session_id, attempt_id, argv, proc,
                                                     self._clock)

    def get(self, session_id: str) -> ExecSession:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no exec session {session_id} here (it ended and was "
                                "collected, or its worker restarted)")
        return session

    def end(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            session.kill()

    def sweep(self, attempt_live) -> list[str]:
        """Kill and drop sessions idle for IDLE_S or whose attempt ended; their ids."""
        now = self._clock.monotonic()
        with self._lock:
            doomed = [s for s in self._sessions.values()
                      if now - s.polled_at > IDLE_S or not attempt_live(s.attempt_id)]
            for s in doomed:
                del self._sessions[s.session_id]
        for s in doomed:
            s.kill()
        return [s.session_id for s in doomed]

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for s in sessions:
            s.kill()
