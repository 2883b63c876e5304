"""The zygote process itself: imports the task runtime once, then forks one child per
callable attempt on request. Runs inside a job's environment; not imported by the worker.

Protocol on the inherited AF_UNIX SOCK_SEQPACKET socket (one pickled dict per packet; both
ends are the same trusted worker, never a network peer):

    worker -> zygote  {"op": "spawn", "id": n, "payload_path", "env", "cwd", "cgroup_procs",
                       "attempt_dir"}
                      with SCM_RIGHTS fds [stdout, stderr]
    zygote -> worker  {"op": "started", "id": n, "pid": p} | {"op": "error", "id": n, "error"}
                      {"op": "exited", "pid": p, "returncode": rc,     (Popen-style rc)
                       "rusage": [cpu_s, maxrss_bytes]}                 (wait4's)

EOF on the socket means the worker is gone: the zygote exits, its children (attempts, each
in its own session) run on for a restarted worker to adopt or kill.

The child: new session, announces itself in the attempt directory (or exits if the worker
gave up on the launch meanwhile: halfborn.py), joins its cgroup before any user code,
stdout/stderr onto the given fds, stdin from /dev/null, signal dispositions reset, env and
cwd replaced, then `task_runtime.run_payload`; it always ends with os._exit so nothing of
the zygote runs twice.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import sys
from pathlib import Path

from iris.worker import halfborn, task_runtime

_MAX_PACKET = 1 << 20  # requests are small: the payload travels as a file path


def _child(sock: socket.socket, wake_r: int, req: dict, fds: list[int]) -> None:
    code = 125
    try:
        os.setsid()
        if req.get("attempt_dir") and not halfborn.announce(Path(req["attempt_dir"])):
            raise SystemExit(125)  # the worker gave up on this launch (halfborn.py)
        if req.get("cgroup_procs"):
            with open(req["cgroup_procs"], "w") as f:
                f.write(str(os.getpid()))
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd in (*fds, devnull, wake_r):
            os.close(fd)
        sock.close()
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL if signum != signal.SIGPIPE else signal.SIG_IGN)
        os.chdir(req["cwd"])
        sys.path[0:0] = [req["cwd"]]  # like `python script` run in the task's directory
        os.environ.clear()
        os.environ.update(req["env"])
        with open(req["payload_path"], "rb") as f:
            payload = f.read()
        code = task_runtime.run_payload(payload)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        task_runtime.record_exit(code)
        os._exit(code)


def _send(sock: socket.socket, msg: dict) -> None:
    sock.send(pickle.dumps(msg))


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"op": "exited", "pid": pid, "returncode": os.waitstatus_to_exitcode(status),
                     "rusage": [usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024]})


def _spawn(sock: socket.socket, wake_r: int, req: dict, fds: list[int]) -> None:
    try:
        pid = os.fork()
    except OSError as exc:
        _send(sock, {"op": "error", "id": req["id"], "error": f"fork failed: {exc}"})
    else:
        if pid == 0:
            _child(sock, wake_r, req, fds)
        _send(sock, {"op": "started", "id": req["id"], "pid": pid})
    finally:
        for fd in fds:
            os.close(fd)  # the child has them; ours would hold the output pipes open


def serve(sock: socket.socket) -> None:
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
            _reap(sock)
        if sock in readable:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_PACKET, 2)
            if not data:
                return
            _spawn(sock, wake_r, pickle.loads(data), fds)


def main() -> None:
    for name in sys.argv[2:]:
        __import__(name)  # pre-import what the job's tasks use (must not start threads)
    import cloudpickle  # noqa: F401  (every callable payload needs it)

    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:  # fork() copies one thread: locks held by the others stay held forever
        print(f"iris zygote: refusing to serve, preloading started {threads - 1} thread(s)",
              file=sys.stderr)
        sys.exit(3)
    sock = socket.socket(fileno=int(sys.argv[1]))
    _send(sock, {"op": "ready", "pid": os.getpid()})
    serve(sock)


if __name__ == "__main__":
    main()
