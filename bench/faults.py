"""Benchmark of faults (issue 14): how fast work recovers, and that no two attempts overlap.

    python -m bench.faults [--quick] [--trials N]

Not a test: it asserts nothing. Real processes: a local cluster of 2 workers per trial. Each
task writes a marker with its pid when its code starts. Scenarios:

Each trial first runs a no-op task on each worker, so that a rerun finds its environment
built (a first build on the other worker took ~3 s here, more than the fault itself).

- kill9: the worker running the task is SIGKILLed at a random moment 0-1 s after the task
  started. recovery_s = kill -> the rerun's code running on the other worker. An overlap is
  a rerun that started while the first attempt's process was still alive.
- sigterm: the same, with SIGTERM (an operator's stop, the machine's shutdown): the worker
  says goodbye (notice, the attempt's exit handed back, goodbye) before its node stops, so
  the time to rerun is the goodbye's, not the 31 s silence rule's (issue 27).
- freeze10: the worker is SIGSTOPped for 10 s, then SIGCONTed: requeues (attempts started
  beyond the first) and overlaps; the lease (15 s) outlasts it, so 0 requeues is the aim.
- freeze40: SIGSTOPped for 40 s (past the 30 s silence timeout): requeued once; overlaps.

(A SIGSTOP is what the controller sees of a partition: silence. Partitions in network
namespaces too, as root: partition10 / partition60 cut a worker's link for 10 s / 60 s.)
--quick: 5 kill9 and 5 sigterm trials and one freeze10; the full run: --trials kill9 and
sigterm trials each (default 50), freeze40, partition10 and partition60. Last line: one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import iris
from bench._report import fmt, step
from iris.client.jobs import _controller
from iris.worker.records import is_alive


def hold(marker_dir: str) -> None:
    Path(marker_dir, f"start-{os.environ['IRIS_ATTEMPT_ID']}").write_text(
        f"{os.getpid()} {time.monotonic()}")
    gate = threading.Event()
    while not Path(marker_dir, "release").exists() and not gate.wait(0.05):
        pass


def _starts(d: Path) -> list[tuple[int, float]]:
    out = []
    for p in d.glob("start-*"):
        words = p.read_text().split()
        if len(words) == 2:  # else being written: seen at the next look
            out.append((int(words[0]), float(words[1])))
    return sorted(out, key=lambda x: x[1])


def _wait(pred, timeout: float):
    end, gate = time.monotonic() + timeout, threading.Event()
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        gate.wait(0.02)
    return None


def _warm() -> None:
    """A no-op task on each worker first (2 workers of 1 CPU each: one task each), so every
    worker has built the job's environment and its zygote: a rerun then costs what the
    fault costs, not a first build."""


def trial(kind: str, freeze_s: float = 0.0) -> dict:
    with tempfile.TemporaryDirectory() as tmp, \
            iris.local_cluster(workers=2, state_dir=Path(tmp) / "c", worker_cpu=1) as ctx:
        marks = Path(tmp)
        iris.submit(_warm, replicas=2).wait(timeout=300)
        job = iris.submit(hold, str(marks))
        first = _wait(lambda: _starts(marks), 120)[0]
        threading.Event().wait(random.random())
        worker = job.tasks()[0]["worker_id"]
        pid = next(int(w["attributes"]["pid"]) for w in _controller(ctx, "list_workers")
                   if w["worker_id"] == worker)
        hit = time.monotonic()
        overlap, recovery = False, None
        if kind in ("kill9", "sigterm"):
            os.kill(pid, signal.SIGKILL if kind == "kill9" else signal.SIGTERM)
            second = _wait(lambda: _starts(marks)[1:], 120)
            if second:
                overlap = is_alive(first[0])
                recovery = second[0][1] - hit
        else:
            os.kill(pid, signal.SIGSTOP)
            second = _wait(lambda: _starts(marks)[1:], freeze_s)
            overlap = bool(second) and is_alive(first[0])
            os.kill(pid, signal.SIGCONT)
        (marks / "release").touch()
        job.wait(timeout=120)
        return {"recovery_s": recovery, "overlap": overlap, "starts": len(_starts(marks))}


def partition(cut_s: float) -> dict:
    """A worker in its own network namespace, its link down for `cut_s`."""
    from bench import _netns

    with tempfile.TemporaryDirectory() as tmp:
        marks = Path(tmp, "marks")
        marks.mkdir()
        with _netns.cluster(Path(tmp)) as net:
            os.environ["IRIS_KEYS_DIR"] = str(net.keys)
            try:
                with iris.connect(net.address):
                    job = iris.submit(["sh", "-c", _netns.HOLD.format(marks=marks)])
                    first = _wait(lambda: sorted(marks.glob("start-*")), 120)[0]
                    net.cut()
                    threading.Event().wait(cut_s)
                    alive_at_heal = is_alive(int(first.read_text()))
                    net.heal()
                    second = _wait(lambda: sorted(marks.glob("start-*"))[1:], 60)
                    overlap = bool(second) and alive_at_heal
                    (marks / "release").touch()
                    job.wait(timeout=120)
            finally:
                del os.environ["IRIS_KEYS_DIR"]
        return {"requeues": len(list(marks.glob("start-*"))) - 1, "overlap": overlap}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--trials", type=int, default=50)
    args = ap.parse_args()
    n = 5 if args.quick else args.trials
    step(f"{n} kill -9 trials")
    kills = [trial("kill9") for _ in range(n)]
    rec = [k["recovery_s"] for k in kills if k["recovery_s"] is not None]
    step(f"{n} SIGTERM trials")
    terms = [trial("sigterm") for _ in range(n)]
    reruns = [t["recovery_s"] for t in terms if t["recovery_s"] is not None]
    step("a 10 s freeze")
    f10 = trial("freeze", 10.0)
    out = {"kill9_trials": n, "kill9_recovery_p50_s": statistics.median(rec) if rec else None,
           "kill9_recovery_max_s": max(rec) if rec else None,
           "kill9_overlaps": sum(k["overlap"] for k in kills),
           "kill9_not_rerun": n - len(rec),
           "sigterm_rerun_p50_s": statistics.median(reruns) if reruns else None,
           "sigterm_rerun_max_s": max(reruns) if reruns else None,
           "sigterm_overlaps": sum(t["overlap"] for t in terms),
           "sigterm_not_rerun": n - len(reruns),
           "freeze10_requeues": f10["starts"] - 1, "freeze10_overlaps": int(f10["overlap"])}
    if not args.quick:
        step("a 40 s freeze")
        f40 = trial("freeze", 40.0)
        out.update(freeze40_requeues=f40["starts"] - 1, freeze40_overlaps=int(f40["overlap"]))
        from bench import _netns

        if _netns.available() is None:
            for cut in (10.0, 60.0):
                step(f"a {cut:.0f} s network partition")
                p = partition(cut)
                out[f"partition{cut:.0f}_requeues"] = p["requeues"]
                out[f"partition{cut:.0f}_overlaps"] = int(p["overlap"])
    for key, value in out.items():
        print(f"{key:24} {fmt(value) if isinstance(value, float) else value}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
