"""Crashes on real processes: a worker SIGKILLed mid-task; the controller SIGKILLed and restarted."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

import iris
from iris.client.jobs import _controller
from iris.worker.records import is_alive
from tests.conftest import main_thread_asleep, stop_in_order, watchdogs_of

pytestmark = pytest.mark.slow


def hold(marker_dir: str, name: str) -> str:
    """Record this attempt's start, then wait until released; returns the attempt id."""
    attempt = os.environ["IRIS_ATTEMPT_ID"]
    with open(os.path.join(marker_dir, f"start-{name}-{attempt}"), "w") as f:
        f.write(str(os.getpid()))
    release = os.path.join(marker_dir, "release")
    gate = threading.Event()
    while not os.path.exists(release) and not gate.wait(0.05):
        pass
    return attempt


def quick(marker_dir: str, name: str) -> str:
    with open(os.path.join(marker_dir, f"ran-{name}-{os.environ['IRIS_ATTEMPT_ID']}"), "w"):
        pass
    return name


def starts(marker_dir: Path, prefix: str) -> list[Path]:
    return sorted(marker_dir.glob(f"{prefix}-*"))


def test_worker_killed_mid_task_its_task_reruns_on_another_worker(tmp_path, wait_until):
    with iris.local_cluster(workers=2, state_dir=tmp_path / "cluster") as ctx:
        job = iris.submit(hold, str(tmp_path), "victim")
        first = wait_until(lambda: starts(tmp_path, "start-victim"), what="first attempt")[0]
        worker_id = job.tasks()[0]["worker_id"]
        workers = {w["worker_id"]: w for w in _controller(ctx, "list_workers")}
        os.kill(int(workers[worker_id]["attributes"]["pid"]), signal.SIGKILL)
        try:
            second = wait_until(lambda: [p for p in starts(tmp_path, "start-victim")
                                         if p != first], what="the rerun")[0]
            # Fenced: the dead worker's attempt was stopped before the task ran again.
            assert not is_alive(int(first.read_text()))
            task = job.tasks()[0]
            assert task["worker_id"] != worker_id and task["preemptions"] == 1
            assert task["failures"] == 0  # worker loss spends the preemption budget
            (tmp_path / "release").touch()
            assert job.result(timeout=120) == second.name.split("-", 2)[2]
        finally:
            _kill_group(int(first.read_text()))  # only if the test failed: it is dead already


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_controller(state_dir: Path, address: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "iris", "controller", "serve",
                             "--state-dir", str(state_dir), "--bind", address],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    assert line.startswith("controller serving at"), line + proc.stdout.read()
    return proc


def start_worker(address: str, work_dir: Path, log: Path | None = None) -> subprocess.Popen:
    """`log`: the worker's stderr kept there (its log, for a failure's message)."""
    with open(log if log else os.devnull, "ab") as err:
        return subprocess.Popen([sys.executable, "-m", "iris", "worker", "--controller",
                                 address, "--work-dir", str(work_dir), "--attr", "cpu=32"],
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def _stuck(proc: subprocess.Popen, logs: list[Path]) -> str:
    """What a process that did not exit was doing (its threads' stacks, by py-spy, a
    dependency of Iris), and its logs: for a failure's message."""
    spy = Path(sys.executable).with_name("py-spy")
    stacks = subprocess.run([str(spy), "dump", "--pid", str(proc.pid)], capture_output=True,
                            text=True, timeout=60)
    return "\n".join([f"py-spy dump:\n{stacks.stdout}{stacks.stderr}"] + [
        f"{p.name}:\n{p.read_text(errors='replace')}" for p in logs if p.exists()])


def test_controller_sigkill_and_restart_loses_no_job_and_restarts_nothing(tmp_path, wait_until):
    address = f"tcp://127.0.0.1:{free_port()}"
    markers = tmp_path / "markers"
    markers.mkdir()
    controller = start_controller(tmp_path / "state", address)
    workers = [start_worker(address, tmp_path / f"w{i}") for i in range(2)]
    try:
        with iris.connect(address) as ctx:
            wait_until(lambda: len(_controller(ctx, "list_workers")) == 2, what="workers")
            quick_jobs = [iris.submit(quick, str(markers), f"q{i}") for i in range(12)]
            long_jobs = [iris.submit(hold, str(markers), f"l{i}") for i in range(12)]
            assert [j.result(timeout=120) for j in quick_jobs] == [f"q{i}" for i in range(12)]
            wait_until(lambda: len(starts(markers, "start")) == 12, what="long jobs running")
            before = {j["job_id"]: j["state"] for j in _controller(ctx, "list_jobs")}

            os.killpg(controller.pid, signal.SIGKILL)
            controller.wait(30)
            controller = start_controller(tmp_path / "state", address)

            after = wait_until(lambda: _try_list(ctx), what="the restarted controller")
            assert {j["job_id"] for j in after} == set(before)  # every job is still there
            assert all(after_state(after, j.job_id) == "succeeded" for j in quick_jobs)
            (markers / "release").touch()
            results = [j.result(timeout=180) for j in long_jobs]
            statuses = [j.status() for j in long_jobs]
        # Running attempts were not restarted: one start each, and it is the one that finished.
        for i, attempt in enumerate(results):
            assert [p.name for p in starts(markers, f"start-l{i}")] == [f"start-l{i}-{attempt}"], \
                statuses[i]["tasks"]
        # Finished tasks were not run again.
        assert all(len(starts(markers, f"ran-q{i}")) == 1 for i in range(12))
    finally:
        stop_in_order(workers, [controller])


def _try_list(ctx):
    try:
        return _controller(ctx, "list_jobs", timeout_s=5.0)
    except iris.IrisError:
        return None


def after_state(rows: list[dict], job_id: str) -> str:
    return next(r["state"] for r in rows if r["job_id"] == job_id)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def checkpoint_slowly(marker_dir: str) -> None:
    """Holds its slot; on stop, spends a second 'checkpointing' before it exits."""
    gate = threading.Event()

    def checkpoint() -> None:
        gate.wait(1.0)
        Path(marker_dir, "checkpointed").touch()

    iris.on_preempt(checkpoint)
    Path(marker_dir, "running").touch()
    threading.Event().wait(600)


def test_slot_of_a_stopping_task_is_not_reused_until_it_exits(tmp_path, wait_until):
    with iris.local_cluster(workers=1, worker_cpu=1, state_dir=tmp_path / "c",
                            stop_grace_s=30):
        first = iris.submit(checkpoint_slowly, str(tmp_path), resources=iris.Resources(cpu=1))
        wait_until(lambda: (tmp_path / "running").exists(), what="the first task running")
        first.kill()
        second = iris.submit(quick, str(tmp_path), "second", resources=iris.Resources(cpu=1))
        assert second.result(timeout=120) == "second"
        assert (tmp_path / "checkpointed").exists()  # the first exited before the second ran
        task = second.tasks()[0]
        assert task["attempts"] == 1 and task["failures"] == 0


@contextmanager
def _one_worker(tmp_path: Path, wait_until):
    """A controller and one worker (its log kept), registered and with its watchdog running:
    (worker, work dir, log, watchdog pid). Whatever is left is stopped after."""
    address = f"tcp://127.0.0.1:{free_port()}"
    controller = start_controller(tmp_path / "state", address)
    work_dir, log = tmp_path / "w", tmp_path / "worker.log"
    worker = start_worker(address, work_dir, log)
    try:
        with iris.connect(address) as ctx:
            wait_until(lambda: len(_controller(ctx, "list_workers")) == 1, what="the worker")
            (watchdog,) = wait_until(lambda: watchdogs_of(work_dir), what="its watchdog")
        yield worker, work_dir, log, watchdog
    finally:
        for pid in watchdogs_of(work_dir):
            _kill_group(pid)
        stop_in_order([worker], [controller])


def _exits_cleanly(worker: subprocess.Popen, work_dir: Path, log: Path) -> None:
    """The worker exits 0 within 60 s; else its stacks and logs say where it stuck."""
    try:
        assert worker.wait(60) == 0
    except subprocess.TimeoutExpired:
        raise AssertionError("the worker did not exit in 60 s; " + _stuck(worker, [
            log, work_dir / "watchdog.log"])) from None


def test_a_worker_stopped_cleanly_leaves_no_process_behind(tmp_path, wait_until):
    """SIGTERM (a provider deleting its host, an operator's stop): once the worker process
    has exited, nothing it started is still running in its work directory. Its watchdog,
    in a session of its own so that it outlives a crash, exits with a clean stop (before,
    it lingered up to a watch interval and could recreate its lock file in a directory being
    removed: the local provider's contract test failed so in a suite run)."""
    with _one_worker(tmp_path, wait_until) as (worker, work_dir, log, watchdog):
        # A watchdog slow to be scheduled (a loaded host): held still while the worker
        # stops, let go a second later. The worker's exit waits for it.
        os.kill(watchdog, signal.SIGSTOP)
        worker.send_signal(signal.SIGTERM)
        threading.Timer(1.0, os.kill, (watchdog, signal.SIGCONT)).start()
        _exits_cleanly(worker, work_dir, log)
        assert watchdogs_of(work_dir) == []


def _thread_taking(pid: int, signum: int) -> int:
    """A thread of process `pid`, not its main one, that does not block `signum` (ZeroMQ's
    own threads block every signal)."""
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        blocked = int(next(ln for ln in status.splitlines() if ln.startswith("SigBlk:"))
                      .split()[1], 16)
        if tid != pid and not blocked >> (signum - 1) & 1:
            return tid
    raise AssertionError(f"process {pid} has no thread but its main one taking {signum}")


def test_a_sigterm_taken_by_another_thread_still_stops_the_worker(tmp_path, wait_until):
    """The kernel hands a process's SIGTERM to any thread not blocking it, not always the
    main one: it passes over a main thread that has a signal pending and is not yet running
    (a loaded host, the SIGCHLD of a watchdog just stopped). Python runs the handler only on
    the main thread, between bytecodes; one asleep in an unbounded wait never ran it, and the
    worker outlived its SIGTERM until a second one (CI: the clean-stop test above, once).
    Here the signal goes to another thread on purpose: kill(2) of a thread's id tries that
    thread first. The stop's steps are in its log, each with its time."""
    with _one_worker(tmp_path, wait_until) as (worker, work_dir, log, _):
        os.kill(_thread_taking(worker.pid, signal.SIGTERM), signal.SIGTERM)
        _exits_cleanly(worker, work_dir, log)
        text = log.read_text()
        for step in ("worker stopping (SIGTERM)", "stop: notice sent", "stop: leave done",
                     "stop: attempts stopped, watchdog gone", "stop: node stopped"):
            assert step in text, f"{step!r} not in the worker's log:\n{text}"


def test_a_sigterm_taken_by_another_thread_still_stops_the_controller(tmp_path, wait_until):
    """The controller's main thread waits for its stop as the worker's does (in slices,
    iris/base/signals.py), so a SIGTERM the kernel hands to another of its threads still
    stops it, cleanly."""
    controller = start_controller(tmp_path / "state", f"tcp://127.0.0.1:{free_port()}")
    try:
        wait_until(lambda: main_thread_asleep(controller.pid), what="its main thread waiting")
        os.kill(_thread_taking(controller.pid, signal.SIGTERM), signal.SIGTERM)
        try:
            assert controller.wait(60) == 0
        except subprocess.TimeoutExpired:
            raise AssertionError("the controller did not exit in 60 s; "
                                 + _stuck(controller, [])) from None
    finally:
        stop_in_order([controller])
