"""A worker on a host of its own (bench/_netns.py: a network namespace and a veth pair), cut
off from the controller by taking its link down: a short cut costs nothing; a cut past the
lease is fenced (the attempt stopped on the worker's side) and the task runs at most once at
a time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import iris
from bench import _netns
from iris.wire.fencing import (
    BLIP_S,
    FENCE_AFTER_S,
    FENCE_GRACE_S,
    MARGIN_S,
    WATCH_INTERVAL_S,
)
from iris.worker.records import is_alive

pytestmark = pytest.mark.slow


def _starts(d: Path) -> list[Path]:
    return sorted(d.glob("start-*"), key=lambda p: p.stat().st_mtime)


# A blip (half of BLIP_S: costs nothing), or a cut held until the worker's side has fenced
# the attempt: its lease (FENCE_AFTER_S) lapsed and the watchdog stopped it (FENCE_GRACE_S at
# most); MARGIN_S and a generous bound more for a loaded machine.
BLIP_CUT_S = BLIP_S / 2
FENCED_WITHIN_S = FENCE_AFTER_S + FENCE_GRACE_S + WATCH_INTERVAL_S + MARGIN_S + 60.0


@pytest.mark.parametrize("moved", [False, True])
def test_a_partitioned_worker_never_overlaps_its_task(tmp_path, wait_until, moved,
                                                      monkeypatch):
    why_not = _netns.available()
    if why_not:
        pytest.skip(f"{why_not} (scripts/test.sh runs as root and installs iproute2)")
    marks = tmp_path / "marks"
    marks.mkdir()
    with _netns.cluster(tmp_path) as net:
        monkeypatch.setenv("IRIS_KEYS_DIR", str(net.keys))
        with iris.connect(net.address):
            # A command: the namespace has no route to a package index for a job venv.
            job = iris.submit(["sh", "-c", _netns.HOLD.format(marks=marks)],
                              max_retries_failure=0)
            first = wait_until(lambda: _starts(marks), what="the attempt",
                               explain=job.status)[0]
            net.cut()  # the fault: the worker's host is cut off
            if moved:  # until the worker's own side has stopped the attempt (fenced)
                wait_until(lambda: not is_alive(int(first.read_text())),
                           timeout_s=FENCED_WITHIN_S, what="the attempt fenced")
            else:
                threading.Event().wait(BLIP_CUT_S)
            net.heal()
            if moved:  # the worker comes back without the attempt; it runs again there
                wait_until(lambda: _starts(marks)[1:], what="the task again", timeout_s=120,
                               explain=job.status)
            (marks / "release").touch()
            assert job.wait(timeout=120)["state"] == "succeeded"
            task = job.tasks()[0]
    starts = _starts(marks)
    assert starts[-1].name == f"start-{task['attempt_id']}"
    if moved:
        assert len(starts) == 2 and task["preemptions"] == 1 and task["failures"] == 0
    else:
        assert len(starts) == 1 and task["preemptions"] == 0
