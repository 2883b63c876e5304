"""Fixtures shared by every tier: a local cluster, child Python processes, leak checks."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import spawns
from census import (  # noqa: F401 - the --census plugin (tests/census.py)
    pytest_addoption,
    pytest_runtest_makereport,
    pytest_runtest_protocol,
)
from census import pytest_configure as census_configure
from scheduling import finish_unit_fixtures, longest_units_first, make_scheduler

from iris.wire.states import ENV_CACHE_ENV

spawns.install()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# bash ignores SIGINT in a job it starts in the background without job control (`cmd &` in
# a script; some CI runners), and an ignored signal stays ignored through exec: every `iris`
# command the suite starts would then shrug off the Ctrl-C a test sends it
# (test_job_run_names_the_exit_code_and_ctrl_c_stops_the_job waited out its 120 s so). The
# suite's children get SIGINT as a terminal gives it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The worker's variable for where task environments live (iris/wire/states.py).
ENV_CACHE = ENV_CACHE_ENV
_ENV_CACHE_KEY = pytest.StashKey[str]()  # the run's cache, when this process made it


def pytest_configure(config) -> None:
    census_configure(config)
    _share_task_environments(config)


def _share_task_environments(config) -> None:
    """One task environment cache for the whole run: every worker the suite starts (local
    clusters, LocalProvider slices, in-process workers; ~170 in a full run) builds the default
    venv once in all, not once each (issue 33: 251 uv runs, ~30 CPU-s). Made here, before
    xdist starts its workers, which inherit the variable. Tests of building itself give their
    workers a cache of their own. A cache the user set is kept, and kept after the run."""
    if os.environ.get(ENV_CACHE) or hasattr(config, "workerinput"):
        return  # the user's own, or an xdist worker: the run's is already set
    path = tempfile.mkdtemp(prefix="iris-test-envs-")
    os.environ[ENV_CACHE] = path
    config.stash[_ENV_CACHE_KEY] = path


def pytest_unconfigure(config) -> None:
    path = config.stash.get(_ENV_CACHE_KEY, None)
    if path is not None:
        os.environ.pop(ENV_CACHE, None)
        shutil.rmtree(path, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Each unit of work's tests together, the longest units first (tests/scheduling.py): xdist
    hands units out in this order, so a long one does not start last and leave the other
    workers idle."""
    _check_xdist_groups(config, items)
    longest_units_first(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A unit's session fixtures stop when the worker leaves the unit (tests/scheduling.py)."""
    try:
        return (yield)
    finally:
        finish_unit_fixtures(item, nextitem)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under `--dist loadgroup`, whole modules and directories are units (tests/scheduling.py)."""
    if config.getvalue("dist") == "loadgroup":
        return make_scheduler(config, log)
    return None


def _check_xdist_groups(config, items) -> None:
    """Under `--dist loadgroup` xdist sends a group's tests to one worker by the `@group`
    suffix it adds to their ids. A group marked by a directory's conftest after xdist's hook
    ran (tests/providers marks the Slurm tests) is tagged here, as xdist would; a pytest
    whose ids cannot be changed so (9.2 with xdist 3.8) fails the run: it would lose every
    group silently, and each worker would start its own Ray head and Slurm cluster."""
    if not getattr(config.option, "loadgroup", False):
        return  # not an xdist worker of a loadgroup run
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if not names or "@" in item.nodeid.rpartition("]")[2]:
            continue
        item._nodeid = f"{item.nodeid}@{'_'.join(names)}"
        if "@" not in item.nodeid.rpartition("]")[2]:
            raise pytest.UsageError(
                f"--dist loadgroup: xdist could not tag {item.nodeid} with its group (pytest "
                f"{pytest.__version__}); install the versions pyproject.toml pins")


class Child:
    """A Python child process that prints READY (and optional values) when set up."""

    def __init__(self, code: str, env: dict[str, str] | None = None):
        full_env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=full_env, start_new_session=True)
        self.ready_line = ""

    def wait_ready(self, timeout: float = 60.0) -> str:
        """Block until the child prints a line starting with READY; return the rest."""
        result: list[str] = []

        def read() -> None:
            for line in self.proc.stdout:
                if line.startswith("READY"):
                    result.append(line[5:].strip())
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if not result:
            self.kill()
            raise AssertionError(f"child never got ready; stderr:\n{self.proc.stderr.read()}")
        self.ready_line = result[0]
        return self.ready_line

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`: a test's last step for a child hosting a
        cluster (`iris cluster start --local`), which then stops its workers first instead
        of leaving them to find their controller gone (each waits 3 s for it to leave). Not
        the fixture's cleanup: a child that is PID 1 of its own namespace ignores SIGTERM."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


@pytest.fixture
def child_process() -> Iterator:
    children: list[Child] = []

    def start(code: str, env: dict[str, str] | None = None) -> Child:
        child = Child(code, env)
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()
        for stream in (child.proc.stdout, child.proc.stderr):
            stream.close()


def stop_in_order(*groups, grace_s: float = 30.0) -> None:
    """Stop groups of Popen processes (each started with start_new_session) one group after
    another: SIGTERM to each process group, up to `grace_s` to exit, then SIGKILL.

    Workers go first, while the controller they report to still runs: a worker so stopped
    leaves at once, and its watchdog with it. A SIGKILLed worker instead leaves its watchdog
    telling a controller that is gone for 10 s (iris/worker/watchdog.py), which the leak
    check then waits out."""
    for group in groups:
        for proc in group:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 15)
                except (ProcessLookupError, PermissionError):
                    pass
        for proc in group:
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, 9)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait(30)


def main_thread_asleep(pid: int) -> bool:
    """Is the main thread of process `pid` asleep in the kernel (a lock, a poll), not running
    bytecode, which would run a tripped signal handler at once? For the tests that send a
    signal to another of its threads (iris/base/signals.py)."""
    with open(f"/proc/{pid}/task/{pid}/wchan") as f:
        return f.read() not in ("", "0")


def watchdogs_of(work_dir) -> list[int]:
    """Live `python -m iris.worker.watchdog WORK_DIR` processes (not zombies), from /proc."""
    needle = f"iris.worker.watchdog\0{work_dir}\0".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if needle not in f.read():
                        continue
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X"):
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def cluster():
    import iris

    with iris.local_cluster() as ctx:
        yield ctx


@pytest.fixture(autouse=True)
def no_leaked_iris_threads():
    """Fail a test that leaves Iris node or actor threads running."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline_threads = [t for t in threading.enumerate()
                        if t.ident not in before and t.name.startswith("iris-")]
    for t in deadline_threads:
        t.join(timeout=10)
    leaked = [t.name for t in deadline_threads if t.is_alive()]
    assert not leaked, f"leaked Iris threads: {leaked}"


_TAG = "IRIS_TEST_PROCESS_TAG"
# How long processes a test started may take to exit after it ends: a worker stops its
# attempts with their grace (2-10 s in tests), and a crashed worker's watchdog first tells
# the controller (up to 10 s of retries).
_PROCESS_EXIT_S = 40.0


def shared_process_env() -> dict[str, str]:
    """The environment for a process that a session- or module-scoped fixture starts while a
    test runs (first asked for through getfixturevalue): without the test's tag, since it
    outlives the test on purpose."""
    return {k: v for k, v in os.environ.items() if k != _TAG}


def _tagged_processes(tag: str, pids=None) -> dict[int, str]:
    """Live processes whose environment carries `tag`: pid -> command line. Among `pids`
    only, when given (a pid is only ours while its environment still carries the tag)."""
    needle = f"{_TAG}={tag}".encode()
    if pids is None:
        pids = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    found = {}
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone, or not ours to read
    return found


def _left_running(tag: str) -> dict[int, str]:
    """The test's processes still running after _PROCESS_EXIT_S. The machine is scanned
    once, then only the processes found are watched until they are gone, then the machine
    again (for what they started meanwhile)."""
    gate = threading.Event()
    left = _tagged_processes(tag)
    for _ in range(int(_PROCESS_EXIT_S / 0.1)):
        if not left:
            return left
        gate.wait(0.1)
        left = _tagged_processes(tag, list(left)) or _tagged_processes(tag)
    return left


@pytest.fixture(autouse=True)
def no_leaked_processes(request):
    """Fail a test that leaves processes it started running (workers, watchdogs, attempts).

    Every process a test starts inherits a tag in its environment; after the test, tagged
    processes get _PROCESS_EXIT_S to exit. Processes of module- or session-scoped fixtures
    were started before the tag was set, so they are not counted."""
    tag = f"{os.getpid()}-{request.node.nodeid}"
    os.environ[_TAG] = tag
    starts = spawns.started()
    try:
        yield
    finally:
        os.environ.pop(_TAG, None)
    if spawns.started() == starts:
        return  # this process started nothing meanwhile: nothing can carry the tag (spawns.py)
    left = _left_running(tag)
    for pid in left:  # do not let one leak fail every later test too
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    if left:
        raise AssertionError("processes left running after the test: "
                             + "; ".join(f"{pid}: {cmd[:200]}" for pid, cmd in left.items()))


@contextmanager
def as_current(cluster):
    """`cluster` current for the block: a module-scoped cluster shared by a module's tests is
    made in another context than each test's (pytest runs fixtures where it likes)."""
    from iris.actors.current import current_context

    token = current_context.set(cluster)
    try:
        yield cluster
    finally:
        current_context.reset(token)


def wait_for(predicate, timeout_s: float = 120.0, what: str = "condition", explain=None):
    """The first truthy value of `predicate()`, polled every 50 ms for up to `timeout_s`;
    `explain()`, if given, describes the state when the wait times out. For module-scoped
    fixtures; tests take it as the `wait_until` fixture."""
    gate = threading.Event()
    for _ in range(int(timeout_s / 0.05)):
        value = predicate()
        if value:
            return value
        gate.wait(0.05)
    detail = f"; state: {explain()}" if explain else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{detail}")


@pytest.fixture
def wait_until():
    """wait(predicate, timeout_s=120, what=...) -> the predicate's first truthy value.

    Polls every 50 ms, bounded: the things waited for here are other processes' files and
    the controller's state, which offer no event to wait on from the test."""
    return wait_for
