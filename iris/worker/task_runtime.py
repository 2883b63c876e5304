"""What runs inside an attempt process: the preemption hook, the IRIS_* facts, and the
runner for callable tasks. No sockets: importable without pyzmq.

    import iris.worker.task_runtime as rt
    rt.on_preempt(lambda: save_checkpoint())   # runs once on SIGTERM, then the task exits
    rt.on_preempt(lambda notice: save_checkpoint(by=notice.deadline))   # the cloud's notice

The worker stops an attempt with SIGTERM, waits a grace period (10 s by default), then
SIGKILLs the whole process group. Registered callbacks run once, on the first
SIGTERM, on a thread of their own while the main thread runs on; once they return the
process exits at once with code 143 (128 + SIGTERM), so the worker reads it as "stopped"
and the controller can retry from the checkpoint. A callback that takes one argument gets
the cloud's preemption notice (`preemption_notice.Notice`: reason, deadline as wall-clock
seconds, `time_left(now)`) when the stop comes from one, else None; the notice is also
printed to stderr, so the task's log says why it stopped.

A callable task is a cloudpickled `(fn, args, kwargs)`; `python -m iris.worker.task_runtime
PAYLOAD_FILE` runs one. Its result (or exception) is written, cloudpickled, to the file named
by IRIS_RESULT_PATH when that is set; exit code 0 on success, 1 on an exception.
"""

from __future__ import annotations

import io
import os
import signal
import stat
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iris.worker import log_frames

PREEMPT_EXIT_CODE = 128 + signal.SIGTERM
_callbacks: list[Callable[..., None]] = []  # per process by nature: signal handlers are too
_lock = threading.Lock()
_fired = False


@dataclass(frozen=True)
class AttemptInfo:
    task_id: str
    attempt: int
    attempt_dir: str


def current_attempt() -> AttemptInfo | None:
    """This process's task and attempt, from the IRIS_* variables; None outside a task."""
    task_id = os.environ.get("IRIS_TASK_ID")
    if not task_id:
        return None
    return AttemptInfo(task_id=task_id, attempt=int(os.environ.get("IRIS_ATTEMPT", "0")),
                       attempt_dir=os.environ.get("IRIS_ATTEMPT_DIR", ""))


def on_preempt(callback: Callable[..., None]) -> None:
    """Run `callback` once when the worker asks this task to stop, within the grace period;
    one taking an argument gets the cloud's preemption notice (or None on a plain stop)."""
    if not callable(callback):
        raise TypeError(f"on_preempt: expected a callable, got {callback!r}")
    with _lock:
        _callbacks.append(callback)
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) is not _handle_sigterm:
                signal.signal(signal.SIGTERM, _handle_sigterm)
                _watch_wakeup_fd()
        elif signal.getsignal(signal.SIGTERM) is not _handle_sigterm:
            raise RuntimeError("on_preempt: first call must come from the main thread "
                               "(Python installs signal handlers only there)")


def _handle_sigterm(signum: int, frame: object) -> None:
    # The callbacks run on their own thread, not in this handler: the signal may land while
    # the main thread is inside print(), and printing from the handler would then raise
    # "reentrant call" (seen in tests). The main thread runs on until they finish.
    global _fired
    with _lock:
        if _fired:
            return
        _fired = True
        callbacks = list(_callbacks)
    threading.Thread(target=_run_callbacks_then_exit, args=(callbacks,),
                     name="iris-preempt", daemon=True).start()


def _watch_wakeup_fd() -> None:
    """Run the callbacks even when the main thread cannot run the handler: Python runs it
    only there, between bytecodes, and a main thread inside a long C call (an XLA step, a
    lock) or passed over by the kernel for another thread (it had a signal pending) runs it
    late or never, past the grace. Python's C-level handler also writes the signal's number
    to the wakeup fd from whatever thread took it; a thread of ours reads it and fires.
    Left alone where the fd is someone else's (an asyncio loop's signal handlers)."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread after all
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(r)
        os.close(w)
        return
    os.set_blocking(r, True)

    def read() -> None:
        while True:
            try:
                taken = os.read(r, 64)
            except OSError:
                return
            if not taken:
                return
            if signal.SIGTERM in taken:
                _handle_sigterm(signal.SIGTERM, None)

    threading.Thread(target=read, name="iris-preempt-watch", daemon=True).start()


def _run_callbacks_then_exit(callbacks: list[Callable[..., None]]) -> None:
    notice = _notice()
    for callback in callbacks:
        try:
            callback(notice) if _takes_argument(callback) else callback()
        except Exception:
            traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(PREEMPT_EXIT_CODE)


def _notice() -> object | None:
    """The cloud's notice the worker left in this attempt's directory, said on stderr."""
    from iris.base.clock import SYSTEM_CLOCK
    from iris.worker.preemption_notice import read_notice

    attempt_dir = os.environ.get("IRIS_ATTEMPT_DIR", "")
    notice = read_notice(attempt_dir) if attempt_dir else None
    # Under Slurm the same SIGTERM reaches the worker and this task at once; the worker
    # writes the notice within milliseconds (slurm_notice.py): wait that long for it.
    try:
        wait_s = float(os.environ.get("IRIS_NOTICE_WAIT_S", "0"))
    except ValueError:
        wait_s = 0.0
    gate = threading.Event()
    for _ in range(int(wait_s / 0.05) if attempt_dir and notice is None else 0):
        if os.path.exists(os.path.join(attempt_dir, "stop_requested")):
            break  # the worker's own stop, not Slurm's: no notice is coming
        gate.wait(0.05)
        notice = read_notice(attempt_dir)
        if notice is not None:
            break
    if notice is not None:
        print(f"[iris] preemption notice: {notice.reason}; "
              f"{notice.time_left(SYSTEM_CLOCK.wall()):.1f} s left; running on_preempt "
              "callbacks", file=sys.stderr, flush=True)
    return notice


def _takes_argument(callback: Callable[..., None]) -> bool:
    import inspect

    try:
        params = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: call it bare
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in params)


class _OneStream:
    """Both of Python's streams, written in order as log_frames records on the stdout pipe.

    A line is written (one write(2) per record) when it ends, or at flush(), or when the
    other stream writes: like a terminal's line buffering, so output reaches the worker as
    soon as PYTHONUNBUFFERED would send it, but never with a stderr line overtaking a
    stdout line printed before it."""

    def __init__(self, fd: int) -> None:
        from iris.base.clock import SYSTEM_CLOCK

        self._fd = fd
        self._wall = SYSTEM_CLOCK.wall
        self._lock = threading.Lock()
        self._stream = "stdout"
        self._pending = bytearray()
        # A fork (multiprocessing) while another thread held the lock would leave the child
        # blocked on it forever; and the parent's unfinished line is the parent's to write.
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pending = bytearray()

    def write(self, stream: str, data: bytes) -> None:
        with self._lock:
            if stream != self._stream:
                self._flush()
                self._stream = stream
            self._pending += data
            if b"\n" in data or len(self._pending) >= log_frames.MAX_DATA:
                self._flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        records = log_frames.encode(self._stream, bytes(self._pending), self._wall())
        self._pending.clear()
        for record in records:
            written = os.write(self._fd, record)
            if written < len(record):  # a pipe write of <= PIPE_BUF is whole; anything else:
                view = memoryview(record)[written:]
                while view:
                    view = view[os.write(self._fd, view):]


class _StreamSink(io.RawIOBase):
    """sys.stdout's or sys.stderr's bytes into the shared _OneStream."""

    def __init__(self, one: _OneStream, stream: str, fd: int) -> None:
        self._one, self._stream, self._fd = one, stream, fd

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if type(data) is not bytes:
            data = bytes(data)
        self._one.write(self._stream, data)
        return len(data)

    def flush(self) -> None:
        self._one.flush()

    def fileno(self) -> int:  # faulthandler and subprocess still reach the real fd
        return self._fd


def _is_attempt_stdout(fd: int) -> bool:
    """Is `fd` this attempt's stdout FIFO (and not a pipe a test or a parent captures)?"""
    attempt_dir = os.environ.get("IRIS_ATTEMPT_DIR")
    if not attempt_dir:
        return False
    try:
        mine, fifo = os.fstat(fd), os.stat(os.path.join(attempt_dir, log_frames.STDOUT_FIFO))
    except OSError:
        return False
    return stat.S_ISFIFO(mine.st_mode) and (mine.st_dev, mine.st_ino) == (fifo.st_dev,
                                                                          fifo.st_ino)


def tag_output() -> bool:
    """Write sys.stdout and sys.stderr as stream-tagged records to the attempt's stdout pipe,
    so the worker merges them in the order written (bench/log_order.py: ~44 % of lines
    swapped when printed back to back to two pipes). Only inside an attempt whose fd 1 is
    its stdout FIFO; True if installed."""
    if not _is_attempt_stdout(1) or isinstance(getattr(sys.stdout, "buffer", None), _StreamSink):
        return False
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    one = _OneStream(1)
    for name, fd, errors in (("stdout", 1, "strict"), ("stderr", 2, "backslashreplace")):
        old = getattr(sys, name)
        wrapper = io.TextIOWrapper(_StreamSink(one, name, fd),
                                   encoding=getattr(old, "encoding", None) or "utf-8",
                                   errors=errors, line_buffering=True)
        # The wrapper gathers a print()'s pieces (text, sep, end: 4 writes) and hands the
        # line over once, at its newline: 1 call into _OneStream per line, not 4. A line's
        # place in the log is where it ends, so a stderr line printed while a stdout line is
        # unfinished comes first, as a line.
        setattr(sys, name, wrapper)
    return True


def run_payload(payload: bytes) -> int:
    """Unpickle `(fn, args, kwargs)`, call it, store the result; the exit code."""
    import cloudpickle  # here, so the zygote pre-imports it and plain imports stay cheap

    tag_output()

    result_path = os.environ.get("IRIS_RESULT_PATH")
    try:
        fn, args, kwargs = cloudpickle.loads(payload)
        value, code = ("ok", fn(*args, **kwargs)), 0
    except SystemExit:
        raise
    except BaseException as exc:
        traceback.print_exc()
        # The text travels beside the exception: a pickled exception loses its traceback.
        value, code = ("error", exc, traceback.format_exc()), 1
    sys.stdout.flush()
    if result_path and not _write_result(result_path, cloudpickle, value):
        code = code or 1  # a result nobody can receive is a failed task, saying why
    return code


def _write_result(path: str, cloudpickle: object, value: tuple) -> bool:
    """Store the result; False (and the reason on stderr) if it cannot be pickled."""
    ok = True
    try:
        data = cloudpickle.dumps(value)  # type: ignore[attr-defined]
        if value[0] == "error":  # rare: worth one check that the caller can rebuild it
            cloudpickle.loads(data)  # type: ignore[attr-defined]
    except Exception as exc:  # an unpicklable result must not hide the run's outcome
        if value[0] == "error":  # the task raised: the caller still learns what, and where
            data = cloudpickle.dumps(_unpicklable_raise(value[1], exc) + value[2:])  # type: ignore[attr-defined]
        else:
            message = f"the task's return value could not be pickled: {type(exc).__name__}: {exc}"
            print(message, file=sys.stderr, flush=True)
            data = cloudpickle.dumps(("error", RuntimeError(message)))  # type: ignore[attr-defined]
            ok = False
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return ok


def _unpicklable_raise(raised: BaseException, why: Exception) -> tuple:
    """("error", a RemoteError naming the type the task raised) for an exception that cannot
    be pickled (it holds a lock, a socket...) or rebuilt from its pickle (its __init__ wants
    other arguments than its args): it once read "the task's return value could not be
    pickled", as if the task had returned, or only "exited with code 1"."""
    from iris.base.errors import RemoteError

    kind = f"{type(raised).__module__}.{type(raised).__qualname__}"
    return ("error", RemoteError.unpicklable(kind, str(raised), f"{type(why).__name__}: {why}"))


def record_exit(code: int) -> None:
    """Leave the exit code in the attempt directory (`exit_code`, process.py's
    EXIT_CODE_NAME) just before exiting with it: the worker reads it when it cannot reap the
    process (its zygote died and init reaped it; a restarted worker adopted it). Without
    it a task that returned was reported "exit status unknown" and failed."""
    attempt_dir = os.environ.get("IRIS_ATTEMPT_DIR")
    if not attempt_dir:
        return
    path = os.path.join(attempt_dir, "exit_code")
    try:
        with open(f"{path}.tmp", "w") as f:
            f.write(str(code))
        os.replace(f"{path}.tmp", path)
    except OSError:  # the worker then knows no more than before
        pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m iris.worker.task_runtime PAYLOAD_FILE", file=sys.stderr)
        return 2
    with open(args[0], "rb") as f:
        payload = f.read()
    try:
        code = run_payload(payload)
    except SystemExit as exc:
        record_exit(exc.code if isinstance(exc.code, int) else 1)
        raise
    record_exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
