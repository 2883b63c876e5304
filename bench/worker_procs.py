"""Bench: what a worker host's own processes cost in CPU: start-up and idle, per kind.

Per round, against a controller in this process (`iris.local_cluster(workers=0)`):

- worker (`python -m iris worker ...`, as a local cluster starts it): CPU-s when it prints
  "serving", and when it is registered (its lease file written); CPU/s while idle;
  CPU-s over its whole life (start, register, idle, SIGTERM and goodbye; wait4's rusage);
- watchdog (`python -m iris.worker.watchdog DIR`, started by the worker once registered):
  CPU-s when it holds its lock (start-up), CPU/s while idle;
- zygote (`python -P -m iris.worker.zygote_main FD <the runner's preload>`): CPU-s when it
  says ready, and the start latency of a task forked from it (assigned -> user code runs,
  as bench.starts measures it) for a task that only computes and for one that uses the
  public API (`iris.current`), whose modules the zygote pre-imports.

CPU-s are read from /proc/PID/stat (utime + stime, 10 ms ticks), so the medians over the
rounds are what to compare; idle CPU from /proc/PID/task/*/schedstat (nanoseconds) (`python -m bench.ab A B worker_procs`).

    python -m bench.worker_procs [--quick] [--rounds N] [--idle S]

Last line: one JSON object of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cloudpickle

import iris
from bench.starts import _FirstLine
from iris.worker import watchdog as watchdog_module
from iris.worker.process import AttemptProcess, AttemptSpec
from iris.worker.runner import TASK_API, default_base_env
from iris.worker.zygote import Zygote

cloudpickle.register_pickle_by_value(sys.modules[__name__])
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float | None:
    """user + system CPU seconds of process `pid` so far (all its threads), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def run_ns(pid: int) -> int:
    """Nanoseconds on a CPU of the live threads of `pid` (exact, unlike `cpu_s`; for a
    window in which no thread ends)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(task.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def _children(pid: int) -> list[int]:
    """Every child of `pid`, whichever of its threads started it."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(p) for p in task.read_text().split()]
        except OSError:
            pass
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise RuntimeError(f"bench: {what} did not happen in {timeout_s:.0f} s")


def _worker_round(address: str, work_dir: Path, idle_s: float) -> dict:
    proc = subprocess.Popen(
        [sys.executable, "-m", "iris", "worker", "--controller", address, "--work-dir",
         str(work_dir), "--exit-with-parent"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()
        serving = cpu_s(proc.pid)
        if b"serving" not in line:
            raise RuntimeError(f"bench: the worker said {line!r}")
        _wait_for(lambda: (work_dir / "lease.json").exists(), 60, "registration")
        registered = cpu_s(proc.pid)
        watchdog = _wait_for(lambda: [p for p in _children(proc.pid)
                                      if "iris.worker.watchdog" in _cmdline(p)], 60,
                             "the watchdog's start")[0]
        _wait_for(lambda: watchdog_module._lock_held(work_dir), 60, "the watchdog's lock")
        watchdog_start = cpu_s(watchdog)
        time.sleep(1.0)  # the first reports and renewals settle
        w0, d0 = run_ns(proc.pid), run_ns(watchdog)
        time.sleep(idle_s)
        w1, d1 = run_ns(proc.pid), run_ns(watchdog)
        proc.send_signal(signal.SIGTERM)
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
    return {"worker_serving_cpu_s": serving, "worker_registered_cpu_s": registered,
            "worker_idle_cpu_ms_per_s": (w1 - w0) / idle_s / 1e6,
            "worker_life_cpu_s": usage.ru_utime + usage.ru_stime,
            "watchdog_start_cpu_s": watchdog_start,
            "watchdog_idle_cpu_ms_per_s": (d1 - d0) / idle_s / 1e6}


def plain_task() -> None:
    import time

    print("running", time.monotonic(), flush=True)


def api_task() -> None:
    import time

    import iris

    iris.current  # noqa: B018 - the public API's first use, as a task's would be
    print("running", time.monotonic(), flush=True)


def _task_start_ms(zygote: Zygote, fn, root: Path, env: dict) -> float:
    seen = _FirstLine()
    spec = AttemptSpec(task_id="bench", attempt=0, attempt_dir=root, cwd=root.parent, env=env)
    assigned = time.monotonic()
    proc = AttemptProcess.launch(spec, zygote.spawner(cloudpickle.dumps((fn, (), {}))), seen)
    outcome = proc.wait(60.0)
    if outcome is None or not outcome.ok or seen.value is None:
        raise RuntimeError(f"bench: the task did not run: {outcome}")
    return (seen.value - assigned) * 1000.0


def _zygote_round(root: Path) -> dict:
    root.mkdir(parents=True)
    env = dict(default_base_env())
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    zygote = Zygote(sys.executable, env, preload=TASK_API)
    try:
        ready = cpu_s(zygote.pid)
        plain = _task_start_ms(zygote, plain_task, root / "plain", env)
        api = _task_start_ms(zygote, api_task, root / "api", env)
    finally:
        zygote.close()
    return {"zygote_ready_cpu_s": ready, "task_start_plain_ms": plain,
            "task_start_api_ms": api}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds (about a minute)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 15)")
    parser.add_argument("--idle", type=float, default=5.0, help="idle seconds per round")
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 15)
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="iris-bench-procs-") as tmp, \
            iris.local_cluster(workers=0) as cluster:
        for i in range(rounds + 1):  # the first round warms the caches: not counted
            got = {**_worker_round(cluster.address, Path(tmp) / "worker", args.idle),
                   **_zygote_round(Path(tmp) / f"zygote-{i}")}
            for name, value in got.items():
                if i:
                    samples.setdefault(name, []).append(value)
    result = {name: round(statistics.median(values), 3) for name, values in samples.items()}
    result["rounds"] = rounds
    for name, values in samples.items():
        print(f"{name:32s} median {statistics.median(values):8.3f}  "
              f"min {min(values):8.3f}  max {max(values):8.3f}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
