"""Faults of a worker, on real processes: at most one attempt of a task runs at a time.

Each task writes a marker with its pid when it starts; the test checks, when a rerun starts,
that the earlier attempt's process is gone. Timings are the real ones (wire/fencing.py): a
freeze shorter than the lease costs nothing; a longer one is fenced before the requeue.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import iris
from iris.client.jobs import _controller
from iris.wire.fencing import SILENT_LOST_S
from iris.worker.records import is_alive
from tests.faults.markers import hold, starts

pytestmark = pytest.mark.slow


def _worker_pid(ctx, worker_id: str) -> int:
    workers = {w["worker_id"]: w for w in _controller(ctx, "list_workers")}
    return int(workers[worker_id]["attributes"]["pid"])


def test_a_worker_frozen_5s_loses_nothing(tmp_path, wait_until):
    with iris.local_cluster(workers=1, state_dir=tmp_path / "c") as ctx:
        job = iris.submit(hold, str(tmp_path), "calm")
        wait_until(lambda: starts(tmp_path, "calm"), what="the attempt")
        pid = _worker_pid(ctx, job.tasks()[0]["worker_id"])
        os.kill(pid, signal.SIGSTOP)
        threading.Event().wait(5.0)  # the fault itself: a 5 s freeze
        os.kill(pid, signal.SIGCONT)
        (tmp_path / "release").touch()
        assert job.result(timeout=120) == starts(tmp_path, "calm")[0].name.split("-", 2)[2]
        task = job.tasks()[0]
        assert task["preemptions"] == 0 and task["failures"] == 0
        assert len(starts(tmp_path, "calm")) == 1


@pytest.mark.soak  # waits out the silence rule (SILENT_LOST_S, 30 s): the soak tier
def test_a_worker_frozen_past_the_timeout_is_fenced_before_its_task_runs_again(
        tmp_path, wait_until):
    with iris.local_cluster(workers=2, state_dir=tmp_path / "c") as ctx:
        job = iris.submit(hold, str(tmp_path), "frozen")
        first = wait_until(lambda: starts(tmp_path, "frozen"), what="the attempt")[0]
        pid = _worker_pid(ctx, job.tasks()[0]["worker_id"])
        os.kill(pid, signal.SIGSTOP)
        try:
            second = wait_until(lambda: starts(tmp_path, "frozen")[1:], what="the rerun",
                                timeout_s=SILENT_LOST_S + 90)[0]
            # The frozen worker's watchdog stopped the first attempt when its lease lapsed,
            # before the controller gave up on the worker and ran the task again.
            assert not is_alive(int(first.read_text()))
            assert second.stat().st_mtime > first.stat().st_mtime
        finally:
            os.kill(pid, signal.SIGCONT)
        (tmp_path / "release").touch()
        assert job.result(timeout=120) == second.name.split("-", 2)[2]
        assert len(starts(tmp_path, "frozen")) == 2


def test_a_worker_continued_after_it_was_lost_joins_again_and_runs_work(tmp_path, wait_until):
    """SIGSTOP past the lost threshold, then SIGCONT: its old credential is no use (lost:
    swept), it is told so, joins again under its id, registers and runs a new task; it is
    never listed twice."""
    with iris.local_cluster(workers=1, state_dir=tmp_path / "c") as ctx:
        [worker] = _controller(ctx, "list_workers")
        pid = int(worker["attributes"]["pid"])
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: not _controller(ctx, "list_workers"), what="the worker lost",
                       timeout_s=SILENT_LOST_S + 90)
        finally:
            os.kill(pid, signal.SIGCONT)
        [again] = wait_until(lambda: _controller(ctx, "list_workers"),
                             what="the worker registered again")
        assert again["worker_id"] == worker["worker_id"]
        assert iris.submit(["true"]).wait(timeout=120)["state"] == "succeeded"
        assert [w["worker_id"] for w in _controller(ctx, "list_workers")] == [again["worker_id"]]


def test_a_second_worker_on_the_same_work_dir_refuses_to_start(tmp_path):
    with iris.local_cluster(workers=0, state_dir=tmp_path / "c") as ctx:
        argv = [sys.executable, "-m", "iris", "worker", "--controller", ctx.address,
                "--work-dir", str(tmp_path / "shared")]
        first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True)
        try:
            assert "serving at" in first.stdout.readline()
            second = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert second.returncode != 0
            assert f"work directory {tmp_path / 'shared'} is in use" in second.stderr
        finally:
            first.terminate()
            first.wait(60)


def test_the_controller_refuses_a_worker_id_live_at_another_address(tmp_path, wait_until):
    with iris.local_cluster(workers=0, state_dir=tmp_path / "c") as ctx:
        procs = []
        try:
            for name in ("a", "b"):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "iris", "worker", "--controller", ctx.address,
                     "--work-dir", str(tmp_path / name), "--worker-id", "twin"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                if name == "a":
                    wait_until(lambda: _controller(ctx, "list_workers"), what="the first")
            seen: list[str] = []

            def refused() -> bool:
                line = procs[1].stderr.readline()
                seen.append(line)
                return "is live at" in line
            wait_until(refused, what="the second worker told why it is refused")
            listed = _controller(ctx, "list_workers")
            assert len(listed) == 1 and listed[0]["attributes"]["pid"] == str(procs[0].pid)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(60)


def test_a_task_killed_9_runs_again_on_its_failure_budget_never_twice_at_once(
        tmp_path, wait_until):
    with iris.local_cluster(workers=1, state_dir=tmp_path / "c"):
        job = iris.submit(hold, str(tmp_path), "victim", max_retries_failure=1)
        first = wait_until(lambda: starts(tmp_path, "victim"), what="the attempt")[0]
        os.kill(int(first.read_text()), signal.SIGKILL)
        second = wait_until(lambda: starts(tmp_path, "victim")[1:], what="the retry")[0]
        assert not is_alive(int(first.read_text()))
        (tmp_path / "release").touch()
        assert job.result(timeout=120) == second.name.split("-", 2)[2]
        task = job.tasks()[0]
        assert task["failures"] == 1 and task["attempts"] == 2


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_task_whose_zygote_was_killed_9_still_returns_its_value(tmp_path, wait_until):
    """kill -9 the zygote a callable task was forked from: the task runs on and init reaps
    it, so neither the zygote nor wait() can tell the worker its exit status; the task's
    runtime leaves its exit code in the attempt directory, and the job succeeds with its
    value. Before, it failed as "adopted after a worker restart: exit status unknown"
    (retry budget spent), its value lost; the next task got a new zygote."""
    with iris.local_cluster(workers=1, state_dir=tmp_path / "c"):
        job = iris.submit(hold, str(tmp_path), "orphan")
        first = wait_until(lambda: starts(tmp_path, "orphan"), what="the attempt")[0]
        task = int(first.read_text())
        zygote = _parent(task)
        assert b"zygote_main" in Path(f"/proc/{zygote}/cmdline").read_bytes()
        os.kill(zygote, signal.SIGKILL)
        wait_until(lambda: _parent(task) != zygote, what="the task reparented")
        (tmp_path / "release").touch()
        assert job.result(timeout=120) == first.name.split("-", 2)[2]
        assert job.tasks()[0]["attempts"] == 1
        assert iris.submit(pow, 2, 5).result(timeout=120) == 32
