"""Child processes for benchmarks: spawn with a line protocol on stdio, and kill them all.

Not a supervisor: a child that dies fails the benchmark. Each child runs in its own process
group (so its grandchildren die with it) and talks to the parent in lines: it prints
`READY ...` when set up, reads commands from stdin and prints one reply line per command.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


class ChildError(RuntimeError):
    """A benchmark child exited, or said nothing in time."""


class Child:
    """One child process: `send()` a line, `expect()` the next line of its stdout."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None,
                 prefix: list[str] | None = None):
        """`prefix`: a command that runs the interpreter (e.g. `ip netns exec NS`)."""
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_ROOT), full_env.get("PYTHONPATH", "")) if p)
        full_env.update(env or {})
        self.args = args
        self.proc = subprocess.Popen(
            [*(prefix or []), sys.executable, *args], cwd=_ROOT, env=full_env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def expect(self, prefix: str, timeout: float = 60.0) -> str:
        """The rest of the next stdout line starting with `prefix` (other lines are echoed)."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise ChildError(f"{self.args}: no {prefix!r} line within {timeout} s") from None
            if line is None:
                raise ChildError(f"{self.args} exited with {self.proc.wait()} before {prefix!r}")
            if line.startswith(prefix):
                return line[len(prefix):].strip()
            print(f"  [child {self.proc.pid}] {line}", file=sys.stderr)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def exit_with_parent() -> None:
    """In a child: exit as soon as the parent goes (its end of our stdin closes).

    Children run in their own process group, so a parent killed without a chance to clean
    up would otherwise leave them serving forever.
    """
    def watch() -> None:
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def exit_cleanly_on_signals() -> None:
    """In the parent: SIGTERM and SIGHUP unwind like Ctrl-C, so `finally` blocks kill children."""
    def unwind(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, unwind)


class Children:
    """Every child a benchmark started; `kill_all()` (or leaving the `with`) ends them."""

    def __init__(self) -> None:
        self._children: list[Child] = []

    def spawn(self, args: list[str], env: dict[str, str] | None = None,
              prefix: list[str] | None = None) -> Child:
        child = Child(args, env, prefix)
        self._children.append(child)
        return child

    def kill_all(self) -> None:
        while self._children:
            self._children.pop().kill()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()
