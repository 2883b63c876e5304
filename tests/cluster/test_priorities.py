"""Priority bands on real processes: production evicts batch, which resumes and finishes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import iris

pytestmark = pytest.mark.slow


def batch_work(marker_dir: str, name: str) -> str:
    attempt = os.environ["IRIS_ATTEMPT_ID"]
    Path(marker_dir, f"start-{name}-{attempt}").touch()
    gate = threading.Event()
    while not Path(marker_dir, "release").exists() and not gate.wait(0.05):
        pass
    return attempt


def urgent(marker_dir: str) -> str:
    Path(marker_dir, "production-ran").touch()
    return "done"


def starts(marker_dir: Path, name: str) -> list[Path]:
    return sorted(marker_dir.glob(f"start-{name}-*"))


def test_production_preempts_batch_which_resumes_later_and_finishes(tmp_path, wait_until):
    with iris.local_cluster(workers=1, worker_cpu=2, state_dir=tmp_path / "c", stop_grace_s=5):
        batch = iris.submit(batch_work, str(tmp_path), "b", replicas=2,
                            resources=iris.Resources(cpu=1), priority="batch")
        wait_until(lambda: len(starts(tmp_path, "b")) == 2, what="both batch tasks running")
        production = iris.submit(urgent, str(tmp_path), resources=iris.Resources(cpu=2),
                                 priority="production")
        assert production.result(timeout=120) == "done"  # it got the whole worker
        (tmp_path / "release").touch()
        finals = batch.result(timeout=180)
        tasks = batch.tasks()
        assert all(t["preemptions"] == 1 and t["failures"] == 0 for t in tasks), tasks
        assert len(starts(tmp_path, "b")) == 4  # each batch task ran twice: evicted, resumed
        assert set(finals) <= {p.name.split("-", 2)[2] for p in starts(tmp_path, "b")}
