"""The `iris` command for tests that run many of them (issue 33): each command is still a
process of its own running `iris.cli.main`, but forked from a server that imported the
CLI and the cloud clients once, instead of a new interpreter that imports them again.

`python -m iris cluster --config ... status` costs ~2 CPU-seconds before it does anything,
nearly all of it importing google-cloud-compute; the operator's-day tests run dozens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

_SERVER = textwrap.dedent("""
    import importlib, json, os, sys
    for name in sys.argv[1:]:
        importlib.import_module(name)
    from iris.cli.main import main
    requests, replies = sys.stdin, sys.stdout
    print("READY", flush=True)
    for line in requests:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the command: a process of its own, as `python -m iris` would be
            os.setsid()
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(out, fd)
            sys.argv = ["iris", *req["argv"]]
            try:
                code = main(req["argv"])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code or 0)
        print(json.dumps({"pid": pid}), flush=True, file=replies)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True,
              file=replies)
""")


class CliServer:
    """Runs `iris ARGV...` like subprocess.run, forked from one pre-imported interpreter.

    One command at a time; stop with close(). `preload`: modules to import once."""

    def __init__(self, preload: tuple[str, ...] = (), env: dict[str, str] | None = None):
        self._dir = tempfile.TemporaryDirectory(prefix="iris-cli-")
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, *preload],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env, start_new_session=True)
        line = self.proc.stdout.readline()
        if line.strip() != "READY":
            self.close()
            raise AssertionError(f"the CLI server did not start: {line!r}")

    def run(self, argv: list[str], env: dict[str, str],
            timeout: float = 300) -> subprocess.CompletedProcess:
        out, err = Path(self._dir.name) / "out", Path(self._dir.name) / "err"
        self.proc.stdin.write(json.dumps({"argv": list(argv), "env": env, "cwd": os.getcwd(),
                                          "stdout": str(out), "stderr": str(err)}) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self.proc.stdout.readline())["pid"]
        reply: list[str] = []

        def wait() -> None:
            reply.append(self.proc.stdout.readline())

        import threading

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(timeout)
        if not reply:
            os.killpg(pid, 9)
            waiter.join(30)
            raise subprocess.TimeoutExpired(["iris", *argv], timeout, out.read_text(),
                                            err.read_text())  # what it said, to see why
        code = json.loads(reply[0])["code"]
        return subprocess.CompletedProcess(["iris", *argv], code, out.read_text(),
                                           err.read_text())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the server's loop ends
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._dir.cleanup()
