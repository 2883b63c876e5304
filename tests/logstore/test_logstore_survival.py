"""THE promise of issue 5: what a task printed survives kill -9 of its worker's process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from iris.base.clock import SYSTEM_CLOCK
from iris.logstore.gcs import GcsSink
from iris.logstore.reader import read_logs
from iris.logstore.sinks import LocalDirSink

CHILD = Path(__file__).with_name("survival_child.py")
JOB = "/alice/survivor"
MARGIN_S = 1.5  # lines printed this long before the kill must be readable


def _numbered(sink):
    return [(int(n), float(ts)) for n, ts in (ln.text.split() for ln in read_logs(sink, JOB))]


@pytest.mark.parametrize("kind", ["local", "gcs"])
def test_survival_sigkill_of_worker_tree_keeps_lines_older_than_margin(
        kind, tmp_path, fake_gcs, wait_for):
    if kind == "local":
        sink = LocalDirSink(tmp_path / "logs")
        args = ["local", str(tmp_path / "logs"), JOB]
    else:
        bucket = fake_gcs.new_bucket()
        sink = GcsSink(bucket, "iris", client=fake_gcs.client())
        args = ["gcs", fake_gcs.url, bucket, JOB]
    child = subprocess.Popen([sys.executable, str(CHILD), *args], start_new_session=True)
    try:
        # ~100 lines stored means the task has printed for a few seconds: kill mid-run.
        wait_for(lambda: len(_numbered(sink)) >= 100, what="100 lines stored")
        assert child.poll() is None, "the worker stand-in died on its own"
        # Lines were just seen stored, so a flush just happened; move the kill to the middle
        # of a flush interval, where unshipped lines are at risk.
        SYSTEM_CLOCK.sleep(0.3)
        killed_at = SYSTEM_CLOCK.wall()
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    lines = _numbered(sink)
    numbers = [n for n, _ in lines]
    assert numbers == list(range(len(numbers))), "lines lost, repeated or reordered"
    printed_before_margin = [n for n, ts in lines if ts <= killed_at - MARGIN_S]
    # Every line the task printed up to the margin is stored: the stored prefix is unbroken
    # (checked above) and it reaches past the last line printed before killed_at - margin,
    # because the task prints every ~20 ms and the next one is stored too.
    last_stored_ts = lines[-1][1]
    assert last_stored_ts > killed_at - MARGIN_S, \
        f"newest stored line was printed {killed_at - last_stored_ts:.2f} s before the kill"
    assert printed_before_margin, "the kill came too early to test anything"
