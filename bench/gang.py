"""Benchmark of the scheduling kernels (issue 6): one scheduling pass, and gang alloc/release.

    python -m bench.gang [--quick] [--hosts N] [--pending N] [--gangs N]

Not a test: it asserts nothing about speed. What each figure is:

- schedule_pass_10k_s: wall time of ONE `schedule()` call (building the inputs excluded)
  over a synthetic fleet of 10,000 hosts in 3 regions / 6 zones (60% 32-cpu hosts, 10%
  H100x8 hosts, 30% TPU hosts: v5litepod-16 slices of 4 hosts and single-host v5litepod-8),
  half of them already running batch work, and 100,000 pending tasks from 1,000 jobs of 50
  users across the three bands (cpu tasks, H100 tasks, single-host TPU tasks and
  v5litepod-16 gangs; a fifth of the jobs carry region/zone/preemptible constraints).
  Median of `repeat` passes (3; 1 with --quick). Also printed: what the pass decided.
- schedule_pass_10k_allfit_s: the same, but every one of 100,000 one-cpu tasks fits (10,000
  idle 32-cpu hosts, 50 users, 3 bands): the pass that assigns the most.
- policy_pass_off_s / policy_pass_on_s / policy_pass_slowdown (and *_cpu_s): the 10k-host
  pass with accelerator fallbacks and budgets off vs on; see bench/_policy_pass.py.
- gangs_per_s_inprocess: gangs allocated AND released per second through the pure
  gangs object (GangTracker) + 3 region ledgers in this one process, messages handed over in memory
  (64 gangs in flight; each gang is one v5litepod-16 slice; released as soon as placed).
  This is the kernels' ceiling, NOT the issue's figure.
- gangs_per_s / ray_gangs_per_s: the issue's figure, through the real Region actors over
  ZeroMQ (3 region processes), beside Ray placement groups in the same run; see
  bench/_gang_actors.py for exactly what is timed. `--no-ray` skips Ray.
- gangs_per_s_controller: gangs placed per second THROUGH THE CONTROLLER: submitted as jobs
  to a real Controller actor, scheduled, reserved and committed through Region actors in 3
  processes of their own (`ControllerConfig.region_actors`), assigned; see
  bench/_gang_controller.py (and bench/gang_e2e.py, which runs it alone for bench.ab).
- multislice_gangs_per_s / ray_multislice_gangs_per_s / multislice_gangs_per_s_controller:
  the same three, each gang 2 whole v5litepod-16 slices (8 hosts, `count=2`) reserved in
  one round in one region (issue 20); Ray's peer is a placement group of 8 bundles.

The last line printed is one JSON object of every figure.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections import Counter, deque

from bench._report import peer_installed
from iris.base.clock import SYSTEM_CLOCK
from iris.base.resources import Resources
from iris.controller.gangs.ledger import ReservationLedger, SliceSpec
from iris.controller.gangs.tracking import CoordinatorConfig, GangTracker, Phase
from iris.controller.scheduling.constraints import parse_constraints
from iris.controller.scheduling.gang_placement import GangRequest
from iris.controller.scheduling.model import (
    Band,
    Demand,
    GangShape,
    HostView,
    RunningAttempt,
    TaskDemand,
)
from iris.controller.scheduling.scheduler import schedule

REGIONS = ("us-central2", "us-east5", "europe-west4")
GB = 10**9


def build_fleet(n_hosts: int, rng: random.Random) -> list[HostView]:
    hosts: list[HostView] = []
    n_cpu, n_gpu = int(n_hosts * 0.6), int(n_hosts * 0.1)
    n_tpu = n_hosts - n_cpu - n_gpu
    for i in range(n_cpu):
        region = REGIONS[i % 3]
        running = ()
        if i % 2 == 0:
            running = tuple(RunningAttempt(f"a-c{i}-{k}", f"rt-c{i}-{k}", f"rj{i % 97}",
                                           f"user{i % 50}", Band.BATCH, Demand(8, 16 * GB))
                            for k in range(2))
        hosts.append(HostView(f"cpu-{i}", region, f"{region}-{'ab'[i % 2]}",
                              Demand(32, 128 * GB), scale_group="cpu-32",
                              slice_id=f"cpu-{i}", preemptible=i % 3 == 0, running=running,
                              launch_slots=8))
    for i in range(n_gpu):
        region = REGIONS[i % 3]
        hosts.append(HostView(f"gpu-{i}", region, f"{region}-a", Demand(96, 1000 * GB, 8),
                              scale_group="h100x8", slice_id=f"gpu-{i}", accelerator="H100",
                              launch_slots=8))
    half = n_tpu // 2 // 4 * 4
    for i in range(half):
        s = i // 4
        region = REGIONS[s % 3]
        running = ()
        if s % 2 == 0:
            running = (RunningAttempt(f"a-t{i}", f"rt-t{i}", f"rtj{s % 31}", f"user{s % 50}",
                                      Band.BATCH, Demand(8, 32 * GB, 4)),)
        hosts.append(HostView(f"tpu16-{i}", region, f"{region}-b", Demand(112, 192 * GB, 4),
                              scale_group="v5e-16", slice_id=f"v5e16-{s}",
                              accelerator="v5litepod-16", accelerator_variant="v5litepod",
                              preemptible=True, running=running, launch_slots=8))
    for i in range(n_tpu - half):
        region = REGIONS[i % 3]
        hosts.append(HostView(f"tpu8-{i}", region, f"{region}-a", Demand(224, 384 * GB, 8),
                              scale_group="v5e-8", slice_id=f"v5e8-{i}",
                              accelerator="v5litepod-8", accelerator_variant="v5litepod",
                              preemptible=True, launch_slots=8))
    rng.shuffle(hosts)
    return hosts


_KINDS = (  # (weight, resources, tasks per job)
    (50, Resources(cpu=1, memory="2GB"), 100),
    (20, Resources(cpu=4, memory="16GB"), 100),
    (10, Resources(cpu=8, memory="64GB", gpu="H100", count=8), 100),
    (12, Resources(cpu=8, memory="32GB", tpu="v5litepod-4"), 100),
    (8, Resources(cpu=16, memory="64GB", tpu="v5litepod-16"), 100),  # 25 gangs of 4
)
_CONSTRAINTS = (
    parse_constraints({"region": "us-east5"}),
    parse_constraints({"zone": {"in": ["us-central2-a", "europe-west4-b"]}}),
    parse_constraints({"preemptible": True}),
    parse_constraints({"region": {"ne": "europe-west4"}}),
)


def build_pending(n_tasks: int, rng: random.Random) -> list[TaskDemand]:
    pending: list[TaskDemand] = []
    weights = [k[0] for k in _KINDS]
    job = 0
    while len(pending) < n_tasks:
        _, res, per_job = rng.choices(_KINDS, weights)[0]
        band = rng.choices(list(Band), [10, 30, 60])[0]
        cons = rng.choice(_CONSTRAINTS) if rng.random() < 0.2 else ()
        user = f"user{rng.randrange(50)}"
        gang_size = res.gang_size
        n = min(per_job, n_tasks - len(pending)) // gang_size * gang_size or gang_size
        for t in range(n):
            gang = f"j{job}-g{t // gang_size}" if gang_size > 1 else None
            pending.append(TaskDemand(f"j{job}-t{t}", f"j{job}", user, band, res, cons,
                                      gang, gang_size, float(job)))
        job += 1
    return pending[:n_tasks]


def bench_schedule(n_hosts: int, n_pending: int, repeat: int) -> dict:
    rng = random.Random(6)
    hosts = build_fleet(n_hosts, rng)
    pending = build_pending(n_pending, rng)
    times, plan = [], None
    for _ in range(repeat):
        t0 = SYSTEM_CLOCK.monotonic()
        plan = schedule(hosts, pending)
        times.append(SYSTEM_CLOCK.monotonic() - t0)
    assert plan is not None
    codes = Counter(r.code.value for r in plan.reasons.values())
    print(f"schedule pass: {n_hosts} hosts, {len(pending)} pending -> "
          f"{len(plan.assignments)} assigned, {len(plan.preemptions)} evictions, "
          f"{len(plan.gang_requests)} gang asks, pending reasons {dict(codes)}; "
          f"passes took {', '.join(f'{t:.3f}' for t in times)} s")
    return {"schedule_pass_10k_s": round(statistics.median(times), 4),
            "schedule_hosts": n_hosts, "schedule_pending": len(pending),
            "schedule_assigned": len(plan.assignments),
            "schedule_preemptions": len(plan.preemptions),
            "schedule_gang_requests": len(plan.gang_requests)}


def bench_schedule_all_fit(n_hosts: int, n_pending: int) -> dict:
    hosts = [HostView(f"h{i}", REGIONS[i % 3], f"{REGIONS[i % 3]}-a", Demand(32, 128 * GB),
                      slice_id=f"h{i}") for i in range(n_hosts)]
    res = Resources(cpu=1, memory="1GB")
    pending = [TaskDemand(f"t{i}", f"j{i // 100}", f"user{i // 100 % 50}", Band(i // 100 % 3),
                          res, (), None, 1, float(i // 100)) for i in range(n_pending)]
    t0 = SYSTEM_CLOCK.monotonic()
    plan = schedule(hosts, pending)
    elapsed = SYSTEM_CLOCK.monotonic() - t0
    print(f"all-fit pass: {n_hosts} idle hosts, {n_pending} one-cpu tasks -> "
          f"{len(plan.assignments)} assigned in {elapsed:.3f} s")
    return {"schedule_pass_10k_allfit_s": round(elapsed, 4)}


def bench_gangs_inprocess(n_gangs: int, in_flight: int = 64) -> dict:
    ledgers = {r: ReservationLedger(r, [
        SliceSpec(f"{r}-s{i}", "v5litepod-16", tuple(f"{r}-s{i}-h{j}" for j in range(4)))
        for i in range(200)]) for r in REGIONS}
    gangs = GangTracker(CoordinatorConfig())
    shape = GangShape("v5litepod-16", hosts=4, whole_slices=1)
    net: deque = deque()
    done = started = 0
    now = 0.0

    def take() -> None:
        nonlocal done
        for send in gangs.take_sends(now):
            net.extend((send.region, m) for m in send.requests)
        for rnd in gangs.take_outcomes():
            if rnd.phase is Phase.PLACED:
                gangs.release(rnd.key)
            elif rnd.phase is Phase.RELEASED:
                done += 1

    t0 = SYSTEM_CLOCK.monotonic()
    while done < n_gangs:
        while started < n_gangs and started - done < in_flight:
            regions = (REGIONS[started % 3], REGIONS[(started + 1) % 3], REGIONS[(started + 2) % 3])
            tasks = tuple(f"j{started}[{i}]" for i in range(4))
            gangs.request(GangRequest(f"g{started}", f"j{started}", Band.BATCH, tasks, shape,
                                      regions))
            started += 1
        take()
        if not net:
            continue
        region, request = net.popleft()
        now += 1e-5  # simulated time only moves the leases; nothing here waits on it
        reply = ledgers[region].handle(request, now)
        if reply is not None:
            gangs.replied(region, [reply], now)
    elapsed = SYSTEM_CLOCK.monotonic() - t0
    print(f"in-process gangs object + 3 ledgers: {n_gangs} gangs allocated and released in "
          f"{elapsed:.2f} s ({in_flight} in flight)")
    return {"gangs_per_s_inprocess": round(n_gangs / elapsed, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--gangs", type=int, default=None)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray comparison")
    args = parser.parse_args(argv)
    result = bench_schedule(args.hosts, args.pending, repeat=1 if args.quick else 3)
    result.update(bench_schedule_all_fit(args.hosts, args.pending))
    from bench._policy_pass import main as policy_pass  # issue 20: fallbacks + budgets

    result.update(policy_pass(3 if args.quick else 7, args.hosts, args.pending))
    result.update(bench_gangs_inprocess(args.gangs or (5_000 if args.quick else 30_000)))
    from bench._gang_actors import bench_gangs_actors, bench_ray_placement_groups

    result.update(bench_gangs_actors(2_000 if args.quick else 10_000))
    from bench._gang_controller import bench_gangs_controller

    result.update(bench_gangs_controller(150 if args.quick else 600, remote=True))
    print(f"through the controller: {result['controller_gangs_placed']} gang jobs placed in "
          f"{result['controller_place_s']:.2f} s")
    result.update(bench_gangs_actors(1_000 if args.quick else 5_000, slices=2))
    result.update(bench_gangs_controller(150 if args.quick else 600, slices=2, remote=True))
    print(f"through the controller: {result['multislice_controller_gangs_placed']} 2-slice "
          f"gang jobs placed in {result['multislice_controller_place_s']:.2f} s")
    if not args.no_ray and peer_installed():
        result.update(bench_ray_placement_groups(500 if args.quick else 2_000))
        result.update(bench_ray_placement_groups(250 if args.quick else 1_000, slices=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
