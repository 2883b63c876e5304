"""Bench: assigned -> user code running, for a callable task whose environment is cached.

Two paths: (a) a new interpreter per attempt (`python -m iris.worker.task_runtime`), and
(b) a fork from the environment's zygote. Both go through the full AttemptProcess start
(cgroup where available, output FIFOs, record file, payload file). "Assigned" is the moment
before the worker starts the attempt; "running" is the CLOCK_MONOTONIC time the user's
function reads as its first act (CLOCK_MONOTONIC is one clock for every process on a host).

    python -m bench.starts [--quick] [--runs N] [--no-env]

Last line: one JSON object, e.g. {"start_subprocess_median_ms": ..., "start_zygote_median_ms": ...}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
from pathlib import Path

import cloudpickle

from iris.base.clock import SYSTEM_CLOCK
from iris.worker.cgroups import detect
from iris.worker.envs import EnvConfig, EnvironmentCache
from iris.worker.process import AttemptProcess, AttemptSpec
from iris.worker.zygote import Zygote, subprocess_callable_spawner

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def user_code() -> None:
    import time

    print("running", time.monotonic(), flush=True)  # the first thing user code does


class _FirstLine:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.value: float | None = None

    def __call__(self, stream: str, line: bytes, ts: float) -> None:
        if stream == "stdout" and line.startswith(b"running ") and self.value is None:
            self.value = float(line.split()[1])
            self.event.set()


def _measure(make_spawner, runs: int, root: Path, env: dict, cgroups) -> list[float]:
    payload = cloudpickle.dumps((user_code, (), {}))
    samples = []
    root.mkdir(parents=True, exist_ok=True)
    for i in range(runs):
        seen = _FirstLine()
        spec = AttemptSpec(task_id="bench", attempt=i, attempt_dir=root / f"a{i}",
                           cwd=root, env=env)
        assigned = SYSTEM_CLOCK.monotonic()
        proc = AttemptProcess.launch(spec, make_spawner(payload), seen, cgroups=cgroups)
        outcome = proc.wait(60.0)
        if outcome is None or not outcome.ok or seen.value is None:
            proc.stop(0)
            raise RuntimeError(f"bench attempt {i} did not run: {outcome}")
        samples.append((seen.value - assigned) * 1000.0)
    return samples


def _summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 runs per path (< 1 min)")
    parser.add_argument("--runs", type=int, default=None, help="runs per path (default 100)")
    parser.add_argument("--no-env", action="store_true",
                        help="use this interpreter instead of a uv-built job environment")
    args = parser.parse_args(argv)
    runs = args.runs or (20 if args.quick else 100)
    cgroups = detect()
    with tempfile.TemporaryDirectory(prefix="iris-bench-starts-") as tmp:
        root = Path(tmp)
        if args.no_env:
            python, env = sys.executable, {"PATH": "/usr/bin:/bin"}
        else:
            job_env = EnvironmentCache(EnvConfig(root=root / "envs")).get([])
            python, env = str(job_env.python), job_env.activate({"PATH": "/usr/bin:/bin"})
        sub = _measure(lambda p: subprocess_callable_spawner(python, p), runs,
                       root / "sub", env, cgroups)
        zygote = Zygote(python, env)
        try:
            zyg = _measure(zygote.spawner, runs, root / "zyg", env, cgroups)
        finally:
            zygote.close()
    (sub_med, sub_p90), (zyg_med, zyg_p90) = _summary(sub), _summary(zyg)
    print(f"subprocess: median {sub_med:.1f} ms, p90 {sub_p90:.1f} ms ({runs} runs)")
    print(f"zygote:     median {zyg_med:.1f} ms, p90 {zyg_p90:.1f} ms ({runs} runs)")
    result = {
        "start_subprocess_median_ms": round(sub_med, 1),
        "start_subprocess_p90_ms": round(sub_p90, 1),
        "start_zygote_median_ms": round(zyg_med, 1),
        "start_zygote_p90_ms": round(zyg_p90, 1),
        "runs": runs,
        "cgroups": cgroups.version.value if cgroups else "none",
        "uv_env": not args.no_env,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
