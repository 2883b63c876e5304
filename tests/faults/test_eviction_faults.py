"""A requeued task waits for its previous attempt to stop: at most one attempt at a time,
even while the old one spends its grace period in an on_preempt callback (a checkpoint).

Worker a runs a batch task whose on_preempt callback takes 10 s; a production task pinned to
worker a evicts it. Worker b is free the whole time, so the batch task could start there at
once; it must wait until the evicted attempt has run its callback and exited.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import iris
from iris.client.jobs import _controller
from tests.faults.markers import hold_with_slow_goodbye, starts

pytestmark = pytest.mark.slow


def _worker(address: str, work_dir, slot: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "iris", "worker", "--controller", address,
                             "--work-dir", str(work_dir), "--attr", f"slot={slot}",
                             "--attr", "cpu=1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _done(marker_dir: str) -> str:
    return "production ran"


def test_an_evicted_task_runs_again_only_after_its_old_attempt_said_goodbye(
        tmp_path, wait_until):
    markers = tmp_path / "m"
    markers.mkdir()
    with iris.local_cluster(workers=0, state_dir=tmp_path / "c", stop_grace_s=30.0) as ctx:
        procs = [_worker(ctx.address, tmp_path / "a", "a")]
        try:
            wait_until(lambda: _controller(ctx, "list_workers"), what="worker a")
            batch = iris.submit(hold_with_slow_goodbye, str(markers), "patient", 10.0,
                                priority="batch",
                                resources=iris.Resources(cpu=1))
            first = wait_until(lambda: starts(markers, "patient"), what="the batch task")[0]
            procs.append(_worker(ctx.address, tmp_path / "b", "b"))
            wait_until(lambda: len(_controller(ctx, "list_workers")) == 2, what="worker b")
            urgent = iris.submit(_done, str(markers), priority="production",
                                 resources=iris.Resources(cpu=1), constraints={"slot": "a"})
            wait_until(lambda: batch.tasks()[0]["preemptions"] == 1, what="the eviction")
            # Anything that makes the controller place work now (here a job that needs no
            # CPU) must still not start the evicted task while its old attempt says goodbye.
            assert iris.submit(_done, str(markers), resources=iris.Resources(cpu=0)).result(
                timeout=120) == "production ran"
            second = wait_until(lambda: starts(markers, "patient")[1:], 120,
                                "the evicted task running again")[0]
            goodbye = markers / f"goodbye-patient-{first.name.split('-', 3)[3]}"
            assert goodbye.exists()  # the old attempt finished its goodbye first
            assert goodbye.stat().st_mtime <= second.stat().st_mtime
            assert not list(markers.glob("overlap-*"))  # and had exited when this started
            assert urgent.result(timeout=120) == "production ran"
            (markers / "release").touch()
            assert batch.result(timeout=120) == second.name.split("-", 3)[3]
            assert batch.tasks()[0]["preemptions"] == 1
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(60)
