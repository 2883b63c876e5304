"""Task logs on a real cluster with GCS (fake-gcs-server, real client): they outlive the worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import iris
from iris.client.jobs import _controller
from iris.logstore.config import LogStoreConfig

ROOT = Path(__file__).resolve().parents[2]
PRINTER = ("import time\n"
           "for i in range(1_000_000):\n"
           "    print(i, repr(time.time()), flush=True)\n"
           "    time.sleep(0.02)\n")
# The promise under test: what a task printed up to this long before its machine died is
# readable afterwards (the shipper flushes every 0.5 s).
MARGIN_S = 1.5


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def test_job_logs_survive_sigkill_of_the_whole_worker_tree(fake_gcs, tmp_path, monkeypatch,
                                                           wait_for):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)  # workers inherit it
    store = LogStoreConfig(kind="gcs", bucket=fake_gcs.new_bucket(), prefix="iris")
    with iris.local_cluster(workers=1, log_store=store, state_dir=tmp_path) as ctx:
        job = iris.submit(["python", "-c", PRINTER], name="printer")
        wait_for(lambda: len(list(job.logs())) > 100, timeout_s=120, what="100 lines shipped")
        worker = _controller(ctx, "list_workers")[0]
        pid = int(worker["attributes"]["pid"])
        tree = [pid, *descendants(pid)]
        killed_at = time.time()
        for victim in tree:
            os.kill(victim, signal.SIGKILL)
        listed = subprocess.run(
            [sys.executable, "-m", "iris", "--address", ctx.address, "job", "logs", job.job_id,
             "--json"], capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(row) for row in listed.stdout.splitlines()]
    printed = [row["text"].split() for row in rows if row["stream"] == "stdout"]
    numbers = [int(n) for n, _ in printed]
    assert numbers == list(range(len(numbers)))  # in order, nothing missing or doubled
    last_printed_at = float(printed[-1][1])
    assert last_printed_at >= killed_at - MARGIN_S, (
        f"the last readable line was printed {killed_at - last_printed_at:.2f} s before the kill")
