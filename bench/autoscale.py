"""Benchmark of autoscaling (issue 7): the kernel's decision time, and a local fleet's reaction.

    python -m bench.autoscale [--quick] [--decide-runs N] [--runs N] [--poll-s S]

Not a test: it asserts nothing about speed. What each figure is:

- decide_ms_1k / decide_ms_10k: wall time of ONE `Autoscaler.decide` (the pure kernel)
  over 1,000 / 10,000 slices in 4 scale groups of different host shapes (cpu, H100x8,
  v5litepod-8, v5litepod-16 of 4 hosts), median of N steady-state decides (20; 7 with
  --quick). The slices are SliceInfo records made by a SimulatedProvider on a FakeClock:
  85% READY with every host registered (half of those busy), 10% CREATING, 5% PREEMPTED;
  pending work asks two groups for more slices than max_slices allows. The clock moves
  2 s (the default poll interval) between decides, as a region's ticks would.
  decide_ms_*_first: the first decide, which adopts every slice it has never seen.
- demand_to_running_s: `iris.local_cluster(autoscale=[RegionScaling(... LocalProvider ...)])`
  with no workers of its own and one cpu scale group (0..2 slices of 1 host), the
  autoscaler's scale_up_delay_s = 0, its other timings the defaults except
  scale_down_delay_s = 1, churn_window_s = 0 (below) and poll_interval_s = --poll-s
  (default 2 s, AutoscalerConfig's). From `iris.submit()` called to the task's code
  running (the task reads CLOCK_MONOTONIC first thing; one clock for every process on the
  host). Includes: the controller routing the demand to the region, the create, a new
  `iris worker` process booting and registering, the task being placed and started.
  Each run starts from zero slices and no worker the controller lists. Median of R runs
  (5; 3 with --quick).
- preempt_to_running_s: a task runs on its slice; `LocalProvider.preempt` SIGKILLs the
  slice's worker process (a cloud reclaiming the machine); seconds until the task's second
  attempt runs its code on a replacement slice. Median of R runs (5; 2 with --quick).
  preempt_to_worker_lost_s: preempt -> the controller no longer lists the slice's worker
  (polled every 20 ms); the autoscaler sees PREEMPTED at its next provider list
  (poll_interval_s), deletes the slice and reports its hosts gone, unless the 3 s
  heartbeat timeout comes first.
- scale_down_s: scale_down_delay_s = 1: a job's result returned (its slice idle from
  then) -> the provider no longer lists the slice (polled every 20 ms). Median over every
  demand run; the floor is the 1 s delay itself. scale_down_worker_unlisted_s: the same
  to the controller no longer listing the slice's worker.

Peer: none timed. Ray's autoscaler launches nodes through a cloud provider; its only
same-machine provider (fake_multinode) is a test fixture of Ray's own, not timed here.

The last line printed is one JSON object of every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import iris
from bench._procs import exit_cleanly_on_signals
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK, FakeClock
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import SliceInfo, SliceState
from iris.controller.providers.local import LocalProvider
from iris.controller.providers.simulated import SimulatedProvider
from iris.controller.regions.autoscaler import Autoscaler, AutoscalerConfig, SliceUsage
from iris.controller.regions.region import RegionScaling

_PEER = ("none: Ray's autoscaler needs a cloud provider; its same-machine fake_multinode "
         "provider is a test fixture of Ray's, not timed here")
_WAIT_S = 180.0  # per step of a cluster run; a loaded 2-core machine boots workers slowly
_POLL_S = 0.02


@dataclass(frozen=True)
class Settings:
    decide_runs: int  # steady-state decides timed per fleet size
    demand_runs: int  # submit -> running runs, each from zero slices
    preempt_runs: int  # preemptions, one job each


_FULL = Settings(decide_runs=20, demand_runs=5, preempt_runs=5)
# About 40 s on a loaded 2-core machine: each cluster run is a worker boot (~1-2 s) plus the
# 1 s scale-down delay.
_QUICK = Settings(decide_runs=7, demand_runs=3, preempt_runs=2)


def _now() -> float:
    return SYSTEM_CLOCK.monotonic()


# ---------------------------------------------------------------- the kernel


def _groups(n_slices: int) -> list[ScaleGroupConfig]:
    cap = n_slices // 4 + 10  # room for a few creates, then max_slices holds the rest
    base = dict(region="us", zones=("us-a", "us-b"), max_slices=cap)
    return [
        ScaleGroupConfig("cpu", accelerator_type="cpu", accelerator_variant=None,
                         hosts_per_slice=1, accelerators_per_host=0, **base),
        ScaleGroupConfig("h100", accelerator_type="gpu", accelerator_variant="H100",
                         hosts_per_slice=1, accelerators_per_host=8, **base),
        ScaleGroupConfig("v5e-8", accelerator_type="tpu", accelerator_variant="v5litepod-8",
                         hosts_per_slice=1, accelerators_per_host=8, **base),
        ScaleGroupConfig("v5e-16", accelerator_type="tpu", accelerator_variant="v5litepod-16",
                         hosts_per_slice=4, accelerators_per_host=4, **base),
    ]


def _fleet(n_slices: int, groups: list[ScaleGroupConfig],
           clock: FakeClock) -> tuple[list[SliceInfo], dict[str, SliceUsage]]:
    """n_slices made by a SimulatedProvider: 85% READY (half busy), 10% CREATING, 5% PREEMPTED."""
    ready = SimulatedProvider(clock)
    booting = SimulatedProvider(clock, boot_delay_s=1e9)
    for i in range(n_slices):
        g = groups[i % len(groups)]
        provider = booting if i % 20 in (1, 2) else ready
        provider.create_slice(g, g.zones[i % 2], f"s{i}")
        if i % 20 == 3:
            provider.preempt(f"s{i}")
    slices = ready.list_slices() + booting.list_slices()
    usage = {s.slice_id: SliceUsage(len(s.hosts), len(s.hosts) * (int(s.slice_id[1:]) % 2))
             for s in slices if s.state is SliceState.READY}
    return slices, usage


def bench_decide(n_slices: int, runs: int) -> dict:
    clock = FakeClock()
    groups = _groups(n_slices)
    slices, usage = _fleet(n_slices, groups, clock)
    kernel = Autoscaler("us", groups, AutoscalerConfig(), id_prefix="bench")
    unmet = {"cpu": 50, "v5e-16": 20}
    times, decisions = [], 0
    for _ in range(runs + 1):
        clock.advance(2.0)
        t0 = _now()
        out = kernel.decide(clock.monotonic(), slices, usage, unmet)
        times.append(_now() - t0)
        decisions += len(out)
    label = f"{n_slices // 1000}k"
    print(f"decide over {n_slices} slices in 4 groups: first (adopting) "
          f"{times[0] * 1e3:.1f} ms, steady median {statistics.median(times[1:]) * 1e3:.2f} ms "
          f"over {runs}; {decisions} decisions in all")
    return {f"decide_ms_{label}": round(statistics.median(times[1:]) * 1e3, 3),
            f"decide_ms_{label}_first": round(times[0] * 1e3, 3)}


# ---------------------------------------------------------------- a local fleet


def started_at() -> float:
    """A task whose first act is reading the host's monotonic clock."""
    import time

    return time.monotonic()


def first_attempt_blocks(marker: str) -> float:
    """The first attempt creates `marker` and runs until killed; a later one returns the
    monotonic time its code began."""
    import os
    import threading
    import time

    began = time.monotonic()
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return began
    threading.Event().wait()  # until the slice is preempted
    return began


def _wait(predicate, what: str) -> None:
    """Poll a thing of another process (the provider's slices, a marker file) to a deadline."""
    gate = threading.Event()
    deadline = _now() + _WAIT_S
    while not predicate():
        if _now() > deadline:
            raise RuntimeError(f"timed out after {_WAIT_S} s waiting for {what}")
        gate.wait(_POLL_S)


def _live(provider: LocalProvider) -> list[SliceInfo]:
    return [s for s in provider.list_slices() if s.state is not SliceState.PREEMPTED]


def _workers() -> set[str]:
    ctx = iris.current()
    return {w["worker_id"] for w in
            ctx.node.call(ctx.address, CONTROLLER_KEY, "list_workers").result(60)}


def _no_workers() -> bool:
    return not _workers()


def _wait_empty(provider: LocalProvider) -> None:
    """No slice, and no worker the controller still lists: a job submitted while the
    controller still lists a just-deleted worker can be placed there and lose an attempt."""
    _wait(lambda: not provider.list_slices(), "zero slices before the run")
    _wait(_no_workers, "the controller to drop the deleted slice's worker")


def _demand_run(provider: LocalProvider) -> tuple[float, float, float]:
    """(submit -> running, result -> slice deleted, result -> its worker unlisted) for one
    job from zero slices."""
    _wait_empty(provider)
    submitted = _now()
    job = iris.submit(started_at, resources=iris.Resources(cpu=1))
    running = job.result(timeout=_WAIT_S)
    idle = _now()
    _wait(lambda: not provider.list_slices(), "the idle slice deleted")
    deleted = _now()
    _wait(_no_workers, "the deleted slice's worker unlisted")
    return running - submitted, deleted - idle, _now() - idle


def _preempt_run(provider: LocalProvider, marker: Path) -> tuple[float, float]:
    """Seconds from preempting a running task's slice to (the controller dropping its
    worker, the task's next attempt's code running)."""
    _wait_empty(provider)
    job = iris.submit(first_attempt_blocks, str(marker), resources=iris.Resources(cpu=1))
    _wait(marker.exists, "the first attempt running")
    [victim] = _live(provider)
    [worker] = _workers()
    preempted = _now()
    provider.preempt(victim.slice_id)
    _wait(lambda: worker not in _workers(), "the preempted worker dropped")
    lost = _now()
    running_again = job.result(timeout=_WAIT_S)
    task = job.tasks()[0]
    if task["preemptions"] != 1 or task["worker_id"].startswith(victim.slice_id):
        raise RuntimeError(f"expected one preemption and another slice, got {task}")
    return lost - preempted, running_again - preempted


def bench_cluster(settings: Settings, poll_s: float) -> dict:
    group = ScaleGroupConfig("cpu", "east", "cpu", None, 1, 0, ("east-a",), min_slices=0,
                             max_slices=2)
    # scale_up_delay 0: time the machinery, not the blip filter. churn_window 0: the bench
    # preempts young slices on purpose, which would otherwise start a 30 min cooldown.
    config = AutoscalerConfig(scale_up_delay_s=0.0, scale_down_delay_s=1.0, churn_window_s=0.0,
                              poll_interval_s=poll_s)
    made: list[LocalProvider] = []
    with tempfile.TemporaryDirectory(prefix="iris-bench-autoscale-") as tmp:
        def provider(address: str) -> LocalProvider:
            made.append(LocalProvider(address, Path(tmp) / "hosts", "east"))
            return made[0]

        scaling = RegionScaling("east", (group,), provider, config)
        with iris.local_cluster(state_dir=Path(tmp) / "c", stop_grace_s=2.0,
                                autoscale=[scaling]):
            demand = [_demand_run(made[0]) for _ in range(settings.demand_runs)]
            preempt = [_preempt_run(made[0], Path(tmp) / f"marker-{i}")
                       for i in range(settings.preempt_runs)]
    up, down, gone = ([d[i] for d in demand] for i in range(3))
    lost, again = [p[0] for p in preempt], [p[1] for p in preempt]
    for name, values in (("submit -> running", up), ("result -> slice deleted", down),
                         ("result -> its worker unlisted", gone),
                         ("preempt -> worker dropped by the controller", lost),
                         ("preempt -> running again", again)):
        print(f"{name}: median {statistics.median(values):.2f} s over {len(values)} "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    return {"demand_to_running_s": round(statistics.median(up), 3),
            "demand_to_running_runs_s": [round(v, 3) for v in up],
            "preempt_to_running_s": round(statistics.median(again), 3),
            "preempt_to_running_runs_s": [round(v, 3) for v in again],
            "preempt_to_worker_lost_s": round(statistics.median(lost), 3),
            "scale_down_s": round(statistics.median(down), 3),
            "scale_down_worker_unlisted_s": round(statistics.median(gone), 3),
            "scale_down_delay_s": config.scale_down_delay_s, "poll_interval_s": poll_s}


def _machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"nproc": os.cpu_count(), "cpu_model": model,
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--decide-runs", type=int, help="steady-state decides per size")
    parser.add_argument("--runs", type=int, help="demand and preemption runs each")
    parser.add_argument("--poll-s", type=float, default=AutoscalerConfig().poll_interval_s,
                        help="the autoscaler's provider list interval (default: its default)")
    args = parser.parse_args(argv)
    exit_cleanly_on_signals()  # SIGTERM unwinds the `with`s: the slices' workers stop
    s = _QUICK if args.quick else _FULL
    if args.decide_runs or args.runs:
        s = Settings(args.decide_runs or s.decide_runs, args.runs or s.demand_runs,
                     args.runs or s.preempt_runs)
    print(f"peer: {_PEER}")
    result: dict = {**_machine()}
    result.update(bench_decide(1_000, s.decide_runs))
    result.update(bench_decide(10_000, s.decide_runs))
    result.update(bench_cluster(s, args.poll_s))
    result["peer"] = _PEER
    print(json.dumps(result))


if __name__ == "__main__":
    main()
