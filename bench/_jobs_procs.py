"""Process-level parts of bench.jobs: cold starts in fresh interpreters, and worker SIGKILLs.

Not the throughput loops (bench.jobs). Every time here is CLOCK_MONOTONIC, one clock for
every process on the host, so a time read inside a task compares with one read here.

    python -m bench._jobs_procs iris-cold          # one Iris cold start; prints RESULT {...}
    python -m bench._jobs_procs ray [--tasks N --rounds R --seq S]   # Ray cold start + loops
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_T0 = __import__("time").monotonic()  # before any import below, as close to exec as we get

from iris.base.clock import SYSTEM_CLOCK  # noqa: E402 - after _T0 on purpose

_ROOT = Path(__file__).resolve().parent.parent
_CHILD_TIMEOUT_S = 300.0
_RERUN_TIMEOUT_S = 60.0
_POLL_S = 0.02  # marker polling; well under the figures' resolution of interest (~0.1 s)


def started_at() -> float:
    """A trivial task: its first act is reading the host's monotonic clock."""
    import time

    return time.monotonic()


def noop() -> None:
    return None


def run_child(mode: str, *extra: str) -> dict:
    """Run `python -m bench._jobs_procs MODE` fresh; its RESULT dict plus `spawned` (our clock)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p))
    spawned = SYSTEM_CLOCK.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "bench._jobs_procs", mode, *extra],
                            cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=_CHILD_TIMEOUT_S)
    finally:
        kill_group(proc.pid)
        proc.wait()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} child failed ({proc.returncode}):\n{out[-2000:]}\n{err[-3000:]}")
    return dict(json.loads(lines[-1][len("RESULT "):]), spawned=spawned)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- children (fresh processes)


def iris_cold_main() -> None:
    """Fresh interpreter: import iris, start a 1-worker local cluster, run one trivial job."""
    import iris

    imported = SYSTEM_CLOCK.monotonic()
    with tempfile.TemporaryDirectory(prefix="iris-bench-cold-") as tmp:
        entered = SYSTEM_CLOCK.monotonic()
        with iris.local_cluster(workers=1, state_dir=tmp, stop_grace_s=2.0):
            up = SYSTEM_CLOCK.monotonic()
            job = iris.submit(started_at)
            submitted = SYSTEM_CLOCK.monotonic()
            running = job.result(timeout=120)
            result = SYSTEM_CLOCK.monotonic()
        stopped = SYSTEM_CLOCK.monotonic()
    print("RESULT " + json.dumps(dict(
        exec=_T0, imported=imported, entered=entered, up=up, submitted=submitted,
        running=running, result=result, stopped=stopped)), flush=True)


def ray_main(tasks: int, rounds: int, seq: int) -> None:
    """Fresh interpreter: import ray, ray.init(), one trivial task; then Ray's loops."""
    import ray

    imported = SYSTEM_CLOCK.monotonic()
    try:
        entered = SYSTEM_CLOCK.monotonic()
        ray.init(log_to_driver=False)
        up = SYSTEM_CLOCK.monotonic()
        remote = ray.remote(started_at)
        running = ray.get(remote.remote())
        result = SYSTEM_CLOCK.monotonic()
        loops = _ray_loops(ray, ray.remote(noop), tasks, rounds, seq)
    finally:
        ray.shutdown()
    print("RESULT " + json.dumps(dict(
        exec=_T0, imported=imported, entered=entered, up=up, running=running, result=result,
        **loops)), flush=True)


def _ray_loops(ray, task, tasks: int, rounds: int, seq: int) -> dict:
    t0 = SYSTEM_CLOCK.monotonic()
    ray.get([task.remote() for _ in range(tasks)])  # warm-up: Ray starts its worker pool
    first = SYSTEM_CLOCK.monotonic() - t0
    walls = []
    for _ in range(rounds):
        t0 = SYSTEM_CLOCK.monotonic()
        ray.get([task.remote() for _ in range(tasks)])
        walls.append(SYSTEM_CLOCK.monotonic() - t0)
    trips = []
    for _ in range(seq):
        t0 = SYSTEM_CLOCK.monotonic()
        ray.get(task.remote())
        trips.append(SYSTEM_CLOCK.monotonic() - t0)
    return {"first_round_s": first, "round_s": walls, "roundtrip_s": trips}


# ---------------------------------------------------------------- worker SIGKILL


def hold(marker_dir: str) -> None:
    """Write `start-<attempt>` = "<monotonic start> <pid>", then wait for `release`."""
    import threading
    import time

    start = time.monotonic()
    path = os.path.join(marker_dir, f"start-{os.environ['IRIS_ATTEMPT_ID']}")
    with open(path + ".tmp", "w") as f:
        f.write(f"{start} {os.getpid()}")
    os.rename(path + ".tmp", path)  # whole or absent: the bench reads it as soon as it exists
    gate = threading.Event()
    while not os.path.exists(os.path.join(marker_dir, "release")):
        gate.wait(0.05)


def _markers(marker_dir: Path) -> dict[str, tuple[float, int]]:
    found = {}
    for path in marker_dir.glob("start-*"):
        if not path.name.endswith(".tmp"):
            start, pid = path.read_text().split()
            found[path.name] = (float(start), int(pid))
    return found


def _wait(predicate, what: str, timeout_s: float = _RERUN_TIMEOUT_S):
    deadline = SYSTEM_CLOCK.monotonic() + timeout_s
    while SYSTEM_CLOCK.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        SYSTEM_CLOCK.sleep(_POLL_S)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def worker_kill_once(tmp: Path) -> dict:
    """SIGKILL the worker running a task; seconds until the task's rerun runs user code.

    Both workers run a job first, so their environments are built and the rerun pays no
    build: the figure is detection + rescheduling + start, what the 6 s budget is about.
    """
    import iris

    markers = tmp / "markers"
    markers.mkdir(parents=True)
    orphans = []
    with iris.local_cluster(workers=2, worker_cpu=8, state_dir=tmp / "cluster",
                            stop_grace_s=2.0) as ctx:
        def workers() -> dict[str, dict]:
            rows = ctx.node.call(ctx.address, "/iris/controller", "list_workers").result(30)
            return {w["worker_id"]: w for w in rows}

        iris.submit(noop, replicas=2, resources=iris.Resources(cpu=8)).result(timeout=120)
        job = iris.submit(hold, str(markers))
        try:
            first = _wait(lambda: _markers(markers), "the first attempt")
            orphans += [pid for _, pid in first.values()]
            worker_id = job.tasks()[0]["worker_id"]
            killed = SYSTEM_CLOCK.monotonic()
            os.kill(int(workers()[worker_id]["attributes"]["pid"]), signal.SIGKILL)
            lost = _wait(lambda: worker_id not in workers() and SYSTEM_CLOCK.monotonic(),
                         "the controller to drop the worker")
            rerun = _wait(lambda: {k: v for k, v in _markers(markers).items()
                                   if k not in first}, "the rerun")
            (rerun_start, rerun_pid), = rerun.values()
            orphans.append(rerun_pid)
            task = job.tasks()[0]
            (markers / "release").touch()
            job.result(timeout=120)
        finally:
            (markers / "release").touch()
            for pid in orphans[:1]:  # the dead worker's task: nobody else will end it
                kill_group(pid)
    return {"rerun_s": rerun_start - killed, "lost_seen_s": lost - killed,
            "preemptions": task["preemptions"], "failures": task["failures"],
            "moved": task["worker_id"] != worker_id}


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "max": ordered[-1],
            "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}


if __name__ == "__main__":
    if sys.argv[1] == "iris-cold":
        iris_cold_main()
    elif sys.argv[1] == "ray":
        _args = dict(zip(sys.argv[2::2], map(int, sys.argv[3::2]), strict=True))
        ray_main(_args.get("--tasks", 1000), _args.get("--rounds", 1), _args.get("--seq", 50))
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}: iris-cold or ray")
