"""A worker told to stop says goodbye before its node stops, on real processes.

The controller here has its silence rule set to 10 minutes, so whatever moves within the
test's waits moved because of the goodbye (the notice, the hand-back of the attempts'
exits, `goodbye`), never because the worker went quiet. Each task writes a marker with its
pid when it starts (tests/faults/markers.py), so the test sees which attempt ran where and
that the stopped one was gone before its rerun began.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import iris
from iris.actors import ClusterContext, Node, NodeConfig, tokens
from iris.client.jobs import _controller
from iris.controller.main import host_controller
from iris.controller.service import ControllerConfig
from iris.worker.records import is_alive
from tests.conftest import ROOT
from tests.faults.markers import hold, starts

pytestmark = pytest.mark.timeout(300)
# Long past anything the test waits for: a rerun within the waits is the goodbye's doing.
_SILENCE_S = 600.0


@contextmanager
def _cluster(tmp: Path, workers: _Workers) -> Iterator[ClusterContext]:
    """A controller in this process; the workers started on it stop before it does (a
    worker whose controller is gone waits for it before it leaves, 3 s each)."""
    node = Node(NodeConfig()).start()
    try:
        host_controller(node, ControllerConfig(state_dir=tmp / "controller",
                                               worker_dead_after_s=_SILENCE_S,
                                               restart_grace_s=_SILENCE_S, stop_grace_s=5.0))
        with ClusterContext(node, node.address) as ctx:
            yield ctx
    finally:
        workers.stop_all()
        node.stop()


class _Worker:
    """An `iris worker` process, as an operator starts one."""

    def __init__(self, ctx: ClusterContext, tmp: Path, worker_id: str):
        self.worker_id = worker_id
        token = (tmp / "controller" / tokens.CLUSTER_TOKEN_FILE).read_text().strip()
        self.log = tmp / f"{worker_id}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "iris", "worker", "--controller", ctx.address,
                 "--worker-id", worker_id, "--work-dir", str(tmp / worker_id),
                 "--attr", "cpu=2", "--attr", "memory=1000000000",
                 "--preemption-notice", "off"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": ROOT, tokens.ENV_TOKEN: token})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class _Workers:
    """`workers(ctx, tmp, id)` starts one; all are stopped by `_cluster` (or at the end)."""

    def __init__(self) -> None:
        self.started: list[_Worker] = []

    def __call__(self, ctx: ClusterContext, tmp: Path, worker_id: str) -> _Worker:
        self.started.append(_Worker(ctx, tmp, worker_id))
        return self.started[-1]

    def stop_all(self) -> None:
        for worker in self.started:
            worker.stop()


@pytest.fixture
def workers() -> Iterator[_Workers]:
    started = _Workers()
    yield started
    started.stop_all()


def _listed(ctx: ClusterContext) -> set[str]:
    return {w["worker_id"] for w in _controller(ctx, "list_workers")}


def _where(job) -> str:
    return job.tasks()[0]["worker_id"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_worker_hands_its_task_back_and_it_reruns_elsewhere_at_once(
        tmp_path, workers, wait_until, signum):
    with _cluster(tmp_path, workers) as ctx:
        first = workers(ctx, tmp_path, "wa")
        wait_until(lambda: _listed(ctx) == {"wa"}, what="worker wa registered")
        job = iris.submit(hold, str(tmp_path))
        [marker] = wait_until(lambda: starts(tmp_path), what="the first attempt")
        assert _where(job) == "wa"
        workers(ctx, tmp_path, "wb")
        wait_until(lambda: _listed(ctx) == {"wa", "wb"}, what="worker wb registered")

        first.proc.send_signal(signum)
        # Within the test's wait (far below the 600 s silence rule): moved by the goodbye.
        wait_until(lambda: starts(tmp_path)[1:], 120, "the rerun",
                   explain=lambda: first.log.read_text()[-3000:])
        assert _where(job) == "wb"
        # At most one attempt at a time: the first was gone when its rerun started.
        assert not is_alive(int(marker.read_text()))
        assert first.proc.wait(timeout=60) == 0
        assert _listed(ctx) == {"wb"}  # it said goodbye before its process ended
        (tmp_path / "release").touch()
        assert job.wait(timeout=120)["state"] == "succeeded"
        task = job.tasks()[0]
        assert (task["failures"], task["preemptions"]) == (0, 1)
        assert len(starts(tmp_path)) == 2
        log = first.log.read_text()
        assert f"worker stopping ({signal.Signals(signum).name})" in log
        assert "goodbye not delivered" not in log


def test_an_idle_worker_leaves_the_list_before_its_process_ends(tmp_path, workers,
                                                                wait_until):
    with _cluster(tmp_path, workers) as ctx:
        worker = workers(ctx, tmp_path, "idle")
        wait_until(lambda: _listed(ctx) == {"idle"}, what="the worker registered")
        worker.proc.terminate()
        assert worker.proc.wait(timeout=60) == 0
        assert _listed(ctx) == set()


def test_a_leaving_worker_gets_no_new_work(tmp_path, workers, wait_until):
    """A task that takes 3 s to stop keeps its worker leaving for that long; a job submitted
    meanwhile goes to the other worker, never to the one that is leaving."""
    with _cluster(tmp_path, workers) as ctx:
        first = workers(ctx, tmp_path, "slow")
        wait_until(lambda: _listed(ctx) == {"slow"}, what="worker slow registered")
        script = ("import signal, time, pathlib, sys\n"
                  "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(3), sys.exit(0)))\n"
                  f"pathlib.Path({str(tmp_path / 'up')!r}).touch()\n"
                  "time.sleep(600)\n")
        stubborn = iris.submit([sys.executable, "-c", script])
        wait_until(lambda: (tmp_path / "up").exists(), what="the stubborn task")
        workers(ctx, tmp_path, "other")
        wait_until(lambda: _listed(ctx) == {"slow", "other"}, what="worker other registered")
        first.proc.terminate()
        wait_until(lambda: stubborn.tasks()[0]["state"] != "running" or
                   _where(stubborn) != "slow", what="the notice requeueing the task")
        late = iris.submit(["true"])
        assert late.wait(timeout=120)["state"] == "succeeded"
        assert _where(late) == "other"
        assert first.proc.wait(timeout=60) == 0
        assert "slow" not in _listed(ctx)
        wait_until(lambda: _where(stubborn) == "other", what="the stubborn task's rerun")
        stubborn.kill()


def _iris(*argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_ADMIN_TOKEN")}
    return subprocess.run([sys.executable, "-m", "iris", *argv], capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL,
                          env={**env, "PYTHONPATH": ROOT})


def test_iris_worker_drain_moves_the_work_and_stops_the_worker(tmp_path, workers,
                                                               wait_until):
    with _cluster(tmp_path, workers) as ctx:
        first = workers(ctx, tmp_path, "wa")
        wait_until(lambda: _listed(ctx) == {"wa"}, what="worker wa registered")
        job = iris.submit(hold, str(tmp_path))
        wait_until(lambda: starts(tmp_path), what="the first attempt")
        workers(ctx, tmp_path, "wb")
        wait_until(lambda: _listed(ctx) == {"wa", "wb"}, what="worker wb registered")

        # Operators only: without the admin token, one line and nothing changes.
        refused = _iris("worker", "drain", "wa", "--address", ctx.address)
        assert refused.returncode == 2 and "admin token" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert first.proc.poll() is None and _listed(ctx) == {"wa", "wb"}
        unknown = _iris("worker", "drain", "nobody", "--address", ctx.address,
                        "--admin-token-file", str(tmp_path / "controller" / "admin.token"))
        assert unknown.returncode == 2 and "no worker 'nobody'" in unknown.stderr

        out = _iris("worker", "drain", "wa", "--address", ctx.address, "--json",
                    "--admin-token-file", str(tmp_path / "controller" / "admin.token"))
        assert out.returncode == 0, out.stderr
        told = json.loads(out.stdout)
        assert told["worker_id"] == "wa" and told["left"] is True
        assert len(told["attempts"]) == 1
        assert first.proc.wait(timeout=60) == 0
        assert _listed(ctx) == {"wb"}
        wait_until(lambda: starts(tmp_path)[1:], 120, "the rerun")
        assert _where(job) == "wb"
        assert "drained by an operator" in first.log.read_text()
        (tmp_path / "release").touch()
        assert job.wait(timeout=120)["state"] == "succeeded"


def _watchdog_running(work_dir: Path) -> bool:
    """Does a watchdog hold this work directory's lock (iris/worker/watchdog.py)?"""
    fd = os.open(work_dir / "watchdog.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_a_clean_stop_makes_no_crash_report_and_a_kill_9_does(tmp_path, workers, wait_until):
    """A worker that said goodbye leaves no lease behind, so its watchdog just exits; one
    killed with SIGKILL leaves its lease, and its watchdog tells the controller, which drops
    it at once (the silence rule here is 10 minutes)."""
    with _cluster(tmp_path, workers) as ctx:
        clean, killed = workers(ctx, tmp_path, "clean"), workers(ctx, tmp_path, "killed")
        wait_until(lambda: all((tmp_path / w / "lease.json").exists() for w in ("clean",
                                                                               "killed")),
                   what="both workers' first acknowledged reports")
        clean.proc.terminate()
        assert clean.proc.wait(timeout=60) == 0
        os.killpg(killed.proc.pid, signal.SIGKILL)
        killed.proc.wait(timeout=60)
        wait_until(lambda: _listed(ctx) == set(), what="the crash report dropping 'killed'")
        assert "worker killed died" in (tmp_path / "killed" / "watchdog.log").read_text()
        wait_until(lambda: not _watchdog_running(tmp_path / "clean"),
                   what="the clean worker's watchdog to exit")
        assert not (tmp_path / "clean" / "lease.json").exists()
        assert "died" not in (tmp_path / "clean" / "watchdog.log").read_text()
