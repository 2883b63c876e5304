"""Bench: Iris on a real Slurm cluster (four slurmd on this host, tests/providers/slurm_cluster.py).

1. Submit -> first task running when the allocation must be created: a controller whose
   only capacity is a Slurm scale group (min_slices 0), one job per run; each run waits for
   the previous allocation to be cancelled, so every run pays for sbatch, Slurm's
   scheduling, the step launch, `iris worker` starting and registering, and the task's
   start. Alternated in the same run with two floors, Slurm's own submit -> process running
   delay: a bare `srun -N1 PYTHON -c 'print(time.time())'`, and the same step inside a bare
   `sbatch` job (what Iris submits: a batch job whose step runs the process; Slurm launches
   batch jobs more slowly than srun's). p50 / p90 of each, and Iris beyond each (p50s).
2. Provider calls per autoscaler tick at N allocations (default 1,000, pending in a DOWN
   partition so none runs): the SliceManager's ticks over the real SlurmProvider, counted by
   command, with nothing changing and then with k allocations cancelled from outside. Beside
   it, the cost of the design it replaces, one `squeue -j ID` per slice per tick, measured
   on a sample and scaled.

    python -m bench.slurm [--quick] [--runs 20] [--allocations 1000]

Last line: one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import cloudpickle

import iris
from bench._report import fmt, step
from iris.base.clock import SYSTEM_CLOCK
from iris.controller.regions.autoscaler import AutoscalerConfig
from iris.controller.regions.scaler import SliceManager
from tests.providers.conftest import slurm_provider
from tests.providers.slurm_cluster import SlurmCluster, slurm_installed
from tests.providers.slurm_world import REGION, iris_on_slurm, slurm_config

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# Everything Iris's own: scale_up_delay_s 0 (its default, 15 s, is a deliberate wait for
# demand to persist, not overhead), the other timings their defaults but scale-down (fast,
# so the next run must make a new allocation).
LATENCY = AutoscalerConfig(scale_up_delay_s=0.0, scale_down_delay_s=0.5, poll_interval_s=2.0,
                           boot_timeout_s=120.0)


def first_act() -> float:
    return time.time()  # the wall clock: submit (client) and start (worker) share this host


def _pctl(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _srun_once(slurm: SlurmCluster) -> float:
    start = time.time()
    out = slurm.run("srun", "-N1", "-p", "main", "--export=NONE", sys.executable, "-c",
                    "import time; print(time.time())")
    return float(out.strip().splitlines()[-1]) - start


def _sbatch_once(slurm: SlurmCluster, out: Path) -> float:
    out.unlink(missing_ok=True)
    start = time.time()
    slurm.run("sbatch", "-N1", "-p", "main", "--export=NONE", "-o", str(out),
              stdin=f"#!/bin/bash\nsrun --export=ALL {sys.executable} -c "
                    "'import time; print(time.time())'\n")
    gate = threading.Event()
    for _ in range(1200):
        if out.exists() and out.read_text().strip():
            return float(out.read_text().split()[0]) - start
        gate.wait(0.05)
    raise TimeoutError("the bare sbatch job never ran")


def _idle(slurm: SlurmCluster) -> None:
    gate = threading.Event()
    for _ in range(1200):  # the previous allocation gone: each run makes its own
        if not slurm.active_jobs():
            return
        gate.wait(0.05)


def _iris_once(world, slurm: SlurmCluster) -> float:
    _idle(slurm)
    submitted = time.time()
    job = iris.submit(first_act, resources=iris.Resources(cpu=1))
    started = job.result(timeout=180)
    return started - submitted


def latency(slurm: SlurmCluster, runs: int, tmp: Path) -> dict:
    groups = {"node": {"provider": "slurm", "accelerator_type": "cpu", "hosts_per_slice": 1,
                       "max_slices": 1, "zones": ["main"],
                       "slurm": {"cpus_per_node": 1, "mem_per_node": "500M"}}}
    samples: dict[str, list[float]] = {"iris": [], "srun": [], "sbatch": []}
    with iris_on_slurm(slurm, tmp, groups, ["main"], autoscaler=LATENCY) as world:
        _iris_once(world, slurm)  # warm: uv's cache, the interpreter's pages
        for i in range(runs):
            step(f"run {i + 1}/{runs}: bare srun, bare sbatch, then Iris")
            _idle(slurm)
            samples["srun"].append(_srun_once(slurm))
            _idle(slurm)
            samples["sbatch"].append(_sbatch_once(slurm, tmp / "sbatch.out"))
            samples["iris"].append(_iris_once(world, slurm))
    out: dict = {"runs": runs}
    for name, values in samples.items():
        out[f"{name}_p50_s"] = statistics.median(values)
        out[f"{name}_p90_s"] = _pctl(values, 0.9)
    out["iris_beyond_srun_p50_s"] = out["iris_p50_s"] - out["srun_p50_s"]
    out["iris_beyond_sbatch_p50_s"] = out["iris_p50_s"] - out["sbatch_p50_s"]
    return out


def _tick(mgr: SliceManager) -> None:
    mgr.tick({}, {})
    mgr.settle(120)


def calls_per_tick(slurm: SlurmCluster, n: int, cancelled: int, tmp: Path) -> dict:
    config = slurm_config({"node": {"provider": "slurm", "accelerator_type": "cpu",
                                    "hosts_per_slice": 1, "max_slices": n + 10,
                                    "zones": ["main"]}}, ["main"], "bench-calls")
    provider = slurm_provider(slurm, config, "tcp://127.0.0.1:9", tmp / "calls", "ab" * 32,
                              region=REGION)
    slurm.set_partition("main", State="DOWN")  # they stay queued (PartitionDown): none runs
    group = config.scale_group("node")
    step(f"submitting {n} allocations through the provider")
    started = time.monotonic()
    for i in range(n):
        provider.create_slice(group, "main", f"bench-{i}")
    create_s = (time.monotonic() - started) / n
    cfg = AutoscalerConfig(poll_interval_s=0.0, hosts_register=False)
    mgr = SliceManager(REGION, [group], provider, SYSTEM_CLOCK, cfg, id_prefix="bench")
    try:
        _tick(mgr)  # the first list
        provider.commands.calls.clear()
        ticks, t0 = 5, time.monotonic()
        for _ in range(ticks):
            _tick(mgr)
            _tick(mgr)  # the list asked at the previous tick is folded in at this one
        lists = provider.commands.calls["squeue"]
        quiet = {k: v / lists for k, v in provider.commands.calls.items()}
        list_ms = (time.monotonic() - t0) / lists * 1000
        step(f"cancelling {cancelled} from outside")
        ids = [j["id"] for j in slurm.jobs() if j["name"].startswith("bench-")][:cancelled]
        slurm.run("scancel", *ids)
        provider.commands.calls.clear()
        for _ in range(ticks):
            _tick(mgr)
            _tick(mgr)
        after = dict(provider.commands.calls)
        sample = 50
        t1 = time.monotonic()
        for job_id in ids[:1] * sample:
            slurm.run("squeue", "-h", "-j", job_id)
        per_slice_ms = (time.monotonic() - t1) / sample * 1000
    finally:
        mgr.close()
        slurm.cancel_all()
    return {"allocations": n, "create_ms_each": create_s * 1000,
            "quiet_calls_per_list": quiet, "list_ms": list_ms,
            "calls_after_cancelling": after, "cancelled": cancelled,
            "per_slice_squeue_ms": per_slice_ms,
            "per_slice_design_s_per_tick": per_slice_ms * n / 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 runs, 200 allocations")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--allocations", type=int, default=1000)
    args = parser.parse_args()
    if not slurm_installed():
        raise SystemExit("bench.slurm: needs slurm-wlm and munge (apt-get install -y "
                         "slurm-wlm munge)")
    runs, n = (5, 200) if args.quick else (args.runs, args.allocations)
    slurm = SlurmCluster().start()
    try:
        with tempfile.TemporaryDirectory(prefix="iris-bench-slurm-") as tmp:
            figures = latency(slurm, runs, Path(tmp) / "latency")
            figures.update(calls=calls_per_tick(slurm, n, max(1, n // 100), Path(tmp)))
    finally:
        slurm.stop()
    c = figures["calls"]
    print(f"submit -> first task running, new allocation ({runs} runs):")
    print(f"  Iris on Slurm  p50 {fmt(figures['iris_p50_s'])} s  p90 {fmt(figures['iris_p90_s'])} s")
    print(f"  bare srun      p50 {fmt(figures['srun_p50_s'])} s  p90 {fmt(figures['srun_p90_s'])} s")
    print(f"  bare sbatch    p50 {fmt(figures['sbatch_p50_s'])} s  p90 "
          f"{fmt(figures['sbatch_p90_s'])} s  (a batch job whose step runs the process)")
    print(f"  Iris beyond Slurm's own delay, p50: {fmt(figures['iris_beyond_srun_p50_s'])} s "
          f"beyond srun, {fmt(figures['iris_beyond_sbatch_p50_s'])} s beyond sbatch")
    print(f"provider calls per list at {c['allocations']} allocations: "
          f"{c['quiet_calls_per_list']} ({fmt(c['list_ms'])} ms a tick)")
    print(f"  after {c['cancelled']} cancelled from outside, the next 10 lists: "
          f"{c['calls_after_cancelling']}")
    print(f"  one squeue per slice instead: {fmt(c['per_slice_squeue_ms'])} ms each, "
          f"{fmt(c['per_slice_design_s_per_tick'])} s a tick")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
