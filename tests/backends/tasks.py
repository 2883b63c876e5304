"""Functions and actors the backend suite runs (shipped to workers by value)."""

from __future__ import annotations

import os
import signal
import threading
import time

import iris


class Boom(Exception):
    """A task's own exception type: it must reach the caller as itself."""


@iris.actor
class Tally:
    """Counts calls; the map tests use it to see how many items ran."""

    def __init__(self, start: int = 0):
        self.n = start

    def add(self, k: int = 1) -> int:
        self.n += k
        return self.n

    def value(self) -> int:
        return self.n

    def mark(self, item: int) -> None:
        """Note that `item` ran (a list, so an item run twice shows twice)."""
        self.items = [*getattr(self, "items", []), item]

    def marked(self) -> list[int]:
        return sorted(getattr(self, "items", []))

    def whoami(self) -> str:
        return iris.task_info().job_id or "client"

    def slow(self, seconds: float) -> str:
        return sleep_for(seconds)

    def die(self) -> None:
        """Crash as a process does; in process (a thread), SystemExit is the actor's death."""
        if iris.backend_kind() == "inprocess":
            raise SystemExit(1)
        os._exit(1)


def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def raise_boom(message: str) -> None:
    raise Boom(message)


def fail_at(x: int) -> int:
    if x == 5:
        raise Boom(f"input {x} is bad")
    return x


def slow_unless_first(x: int) -> int:
    """Input 0 fails at once; the others mark themselves on the tally and take 0.3 s."""
    if x == 0:
        raise Boom("first")
    iris.resolve("tally").mark(x).result(timeout=30)
    threading.Event().wait(0.3)
    return x


def sleep_for(seconds: float) -> str:
    """Sleep in short steps, as a working loop does (an in-process kill stops it between)."""
    gate = threading.Event()
    for _ in range(int(seconds / 0.05)):
        gate.wait(0.05)
    return "slept"


def where_am_i() -> dict:
    info = iris.task_info()
    return {"kind": iris.backend_kind(), "job": info.job_id, "index": info.index,
            "num_tasks": info.num_tasks}


def nested_submit(x: int) -> tuple[str, int]:
    """A task that submits a task: it runs on the same backend."""
    return iris.backend_kind(), iris.submit(square, x).result(timeout=120)


def get_len(ref: iris.ObjectRef) -> int:
    return len(iris.get(ref))


def spawn_and_call() -> tuple[str, int]:
    """Inside a task: spawn an actor by a relative name, resolve it by that name."""
    iris.spawn(Tally, 40, name="helper")
    ref = iris.resolve("helper", timeout=60)
    return ref.name, ref.add(2).result(timeout=60)


def die_once(args: tuple[int, str]) -> int:
    """Kill this worker process the first time input 3 runs (a marker file remembers)."""
    x, marker_dir = args
    marker = os.path.join(marker_dir, f"died-{x}")
    if x == 3 and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)  # never reached
    return x * 10


def touch(path: str) -> None:
    with open(path, "w") as f:
        f.write("ran")


def die_once_always(args: tuple[int, str]) -> int:
    """Kill this worker process every time (a poison item)."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)  # never reached
    return args[0]


class HoldsALock(Exception):
    """Cannot be pickled: on every backend it reaches the caller as RemoteError."""

    def __init__(self, text: str):
        super().__init__(text)
        self.lock = threading.Lock()


class TwoArguments(Exception):
    """Pickles, but its pickle does not load: __init__ wants two arguments, args holds one."""

    def __init__(self, what: str, code: int):
        super().__init__(f"{what} failed with {code}")


def raise_unpicklable(message: str) -> None:
    raise HoldsALock(message)


def raise_two_arguments(what: str) -> None:
    raise TwoArguments(what, 3)
