"""Benchmark of the cloud's preemption notice (issue 19): notice -> work requeued, callback run.

    python -m bench.preemption_notice [--quick] [--trials N]

Not a test: it asserts nothing. Real processes: a local controller, and per trial one
`iris worker` watching a fresh fake GCE metadata server (tests/providers), running one task
that registers an on_preempt callback. The notice is raised on the fake server; measured:

- requeue_s: notice -> the controller shows the task requeued (preemptions == 1), read by
  polling the controller every 20 ms (so up to 20 ms late);
- callback_s: notice -> the task's on_preempt callback started (its own clock stamp);
- time_left_s: what the callback was told it had left (GCE gives 30 s).

Peer: Ray has no handler for GCE's notice (its nodes are lost by heartbeat timeout). The
same path without the notice here is computed, not measured: the VM goes at the deadline
(30 s), then the controller waits SILENT_LOST_S (30 s) of silence: >= 60 s after the notice.
--quick: 2 trials; default 5. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import iris
from bench._report import fmt, step
from iris.actors import tokens
from iris.client.jobs import _controller
from iris.wire.fencing import SILENT_LOST_S
from iris.worker.preemption_notice import PREEMPTED_NOTICE_S
from tests.providers.fake_metadata_server import FakeMetadataServer

_POLL_S = 0.02


def hold(marker: str) -> None:
    """The task: stamp when its on_preempt callback starts, and what it was told."""
    import iris

    def save(notice) -> None:
        now = time.time()
        Path(marker).write_text(json.dumps({"at": now, "left": notice.time_left(now)}))

    iris.on_preempt(save)
    print("running", flush=True)
    threading.Event().wait()


def _trial(ctx, root: Path, index: int) -> dict:
    token = root / "controller" / tokens.CLUSTER_TOKEN_FILE
    work = root / f"worker-{index}"
    work.mkdir()
    marker = root / f"callback-{index}.json"
    with FakeMetadataServer() as meta, open(work / "worker.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "iris", "worker", "--controller", ctx.address, "--work-dir",
             str(work), "--token-file", str(token), "--exit-with-parent"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "GCE_METADATA_HOST": meta.host})
        try:
            meta.wait_for_watchers("preempted")
            job = iris.submit(hold, str(marker), max_retries_preemption=1)
            while not any("running" in line.text for line in job.logs()):
                time.sleep(_POLL_S)
            start = time.time()
            meta.raise_preemption()
            while not job.tasks()[0]["preemptions"]:
                time.sleep(_POLL_S)
            requeue = time.time() - start
            while not marker.exists() or not marker.read_text():
                time.sleep(_POLL_S)
            seen = json.loads(marker.read_text())
            job.kill()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return {"requeue_s": requeue, "callback_s": seen["at"] - start,
            "time_left_s": seen["left"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 trials")
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    trials = 2 if args.quick else args.trials
    with tempfile.TemporaryDirectory(prefix="iris-bench-notice-") as tmp:
        root = Path(tmp)
        with iris.local_cluster(state_dir=root, stop_grace_s=2.0) as ctx:
            _controller(ctx, "list_workers")
            results = []
            for i in range(trials):
                step(f"preemption notice, trial {i + 1}/{trials}")
                results.append(_trial(ctx, root, i))
    figures = {key: {"median": statistics.median(r[key] for r in results),
                     "max": max(r[key] for r in results)}
               for key in ("requeue_s", "callback_s", "time_left_s")}
    figures["trials"] = trials
    figures["without_notice_s_computed"] = PREEMPTED_NOTICE_S + SILENT_LOST_S
    print(f"preemption notice, {trials} trials (median / max):")
    for key in ("requeue_s", "callback_s", "time_left_s"):
        print(f"  {key:12} {fmt(figures[key]['median'])} / {fmt(figures[key]['max'])}")
    print(f"  without the notice (computed): >= {fmt(figures['without_notice_s_computed'])} s "
          "to requeue; Ray: no notice handling (heartbeat timeout)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
