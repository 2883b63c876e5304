"""A day of preemptible capacity replayed through the real scheduling kernels (issue 17).

    python -m bench.daytrace [--quick] [--seed N] [--regions N] [--hours H]
                             [--trace FILE] [--save-trace FILE] [--plot FILE.png]
                             [--diagnose]

A discrete-event simulation on a FakeClock (bench/_daytrace/): capacity per region moves
through the day (the blog's Figure 1: each region's share peaks at its own hour), with a
stock-out and two preemption waves per region; five users submit multi-host TPU gangs
(v5litepod-16/32/64), single-host TPU tasks (v5litepod-4) and CPU jobs in three bands,
four of them camping in the first region. Jobs checkpoint (10-30 min), so a preempted
attempt wastes the work since its last checkpoint. The kernels are the controller's own:
`scheduling.schedule`, the gangs object (`GangTracker`) with one `ReservationLedger` per region, the
`Autoscaler` with `demand.route`, and the `SimulatedProvider` (3 min boot). No sockets.

Three results from the same trace and seed:
- global: one Cluster over every region (Iris);
- per_region: one independent Cluster per region, each job pinned to its user's region
  (a Ray cluster per region);
- upper_bound: offline, see bench/_daytrace/figures.py (min of capacity and submitted
  width per minute, capped by each job's own work);
- booted_bound: the same, but capacity that appears at t counts from t + the provider's
  boot time (3 min) on: tighter, and still an upper bound for any scheduler on the
  simulated provider (the proof is in figures.py). Both are always reported.

Figures (chip-hours are TPU chip-hours; "useful" is work kept: finished, checkpointed, or
still running at the end of the day):
- useful_chip_hours (and by band), wasted_chip_hours (lost since the last checkpoint),
  preemptions (attempts stopped early: slices reclaimed + evictions for higher bands);
- slices_mean / slices_max: TPU slices with work on them, sampled every 5 min;
- queue_hours_p50/p90 per band: submit -> first task running (a job never started counts
  its wait until the end of the day); gang_wait_hours_p90: the same for gang jobs;
- fragmented_chips_mean: free chips on ready hosts that no pending gang can use (on a
  partly used slice, or of a type no gang waits for), while gangs wait;
- pass_ms_by_fleet: median wall ms of one `schedule()` pass by hosts in the pass;
- simulation_wall_s / simulation_cpu_s: what simulating each mode took here;
- global_vs_per_region, global_vs_upper_bound, global_vs_booted_bound: ratios of useful
  chip-hours.

`--diagnose` also prints where the offered capacity went in each mode (busy, idle, booting,
quota left free and why, wasted work by cause; bench/_daytrace/diagnose.py), and puts it
in the JSON under "diagnosis".

`--trace FILE` replays a JSON-lines trace (docs/daytrace.md); `--save-trace` writes the
generated one. The last line printed is one JSON object of every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench._daytrace import diagnose, figures, trace, world
from bench._report import fmt, step
from iris.base.errors import InvalidRequestError


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.daytrace",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="6 simulated hours, not 24")
    p.add_argument("--seed", type=int, default=1, help="generated trace and preemptions")
    p.add_argument("--regions", type=int, default=3, help="regions of the generated day")
    p.add_argument("--hours", type=float, default=None,
                   help="simulated hours of the generated day (default 24; 6 with --quick)")
    p.add_argument("--trace", help="replay this JSON-lines trace instead of generating one")
    p.add_argument("--save-trace", help="write the trace used to this file")
    p.add_argument("--plot", help="write the PNG plot here (needs matplotlib)")
    p.add_argument("--diagnose", action="store_true",
                   help="print where the offered capacity went (and put it in the JSON)")
    return p.parse_args(argv)


def _trace(args: argparse.Namespace) -> trace.Trace:
    if args.trace:
        with open(args.trace, encoding="utf-8") as f:
            return trace.load(f, args.trace)
    hours = args.hours if args.hours is not None else (6.0 if args.quick else 24.0)
    return trace.generate(args.seed, args.regions, hours)


def main(argv: list[str] | None = None) -> dict:
    args = _args(argv)
    try:
        day = _trace(args)
    except (InvalidRequestError, OSError) as exc:
        sys.exit(f"daytrace: {exc}")
    if args.save_trace:
        with open(args.save_trace, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in trace.dump(day))
    print(f"trace: {len(day.regions)} regions, {day.hours:g} h, {len(day.jobs)} jobs, "
          f"seed {day.seed}")
    runs, out, wall, cpu, diag = {}, {}, {}, {}, {}
    for mode in ("global", "per_region"):
        step(f"{mode} scheduling over {day.hours:g} simulated hours")
        started, cpu_started = time.perf_counter(), time.process_time()
        diag[mode] = diagnose.Diagnosis(day.horizon_s) if args.diagnose else None
        runs[mode] = world.run(day, mode, seed=args.seed,
                               observe=diag[mode].observe if args.diagnose else None)
        wall[mode] = round(time.perf_counter() - started, 1)
        cpu[mode] = round(time.process_time() - cpu_started, 1)
        out[mode] = figures.summarize(runs[mode], day.horizon_s)
    bound = figures.upper_bound(day)
    booted = figures.booted_bound(day, world.BOOT_S, world.TICK_S)
    _print(out, bound, wall, cpu)
    print(f"boot-aware upper bound: {fmt(booted['chip_hours'])} chip-hours")
    g, r = out["global"]["useful_chip_hours"], out["per_region"]["useful_chip_hours"]
    result = {
        "hours": day.hours, "regions": len(day.regions), "seed": day.seed,
        "jobs": len(day.jobs), "capacity_chip_hours": round(bound["capacity_chip_hours"], 1),
        "upper_bound_chip_hours": round(bound["chip_hours"], 1),
        "global_vs_per_region": round(g / r, 2) if r else None,
        "global_vs_upper_bound": round(g / bound["chip_hours"], 3) if bound["chip_hours"]
        else None,
        "booted_bound_chip_hours": round(booted["chip_hours"], 1),
        "global_vs_booted_bound": round(g / booted["chip_hours"], 3) if booted["chip_hours"]
        else None,
        "simulation_wall_s": wall, "simulation_cpu_s": cpu, **out,
    }
    if args.diagnose:
        result["diagnosis"] = {m: diag[m].report(runs[m], bound["chip_hours"]) for m in runs}
        for m, report in result["diagnosis"].items():
            diagnose.print_report(m, report)
    if args.plot:
        figures.plot(args.plot, runs, bound, booted,
                     f"{len(day.regions)} regions, {day.hours:g} h, seed {day.seed}")
        print(f"plot: {args.plot}")
    print(json.dumps(result))
    return result


def _print(out: dict, bound: dict, wall: dict, cpu: dict) -> None:
    rows = [("useful chip-hours", "useful_chip_hours"), ("wasted chip-hours",
            "wasted_chip_hours"), ("preemptions", "preemptions"), ("of which evictions",
            "evictions"), ("slices busy, mean", "slices_mean"), ("slices busy, max",
            "slices_max"), ("gang wait p90 (h)", "gang_wait_hours_p90"),
            ("fragmented chips, mean", "fragmented_chips_mean"),
            ("jobs started", "jobs_started"), ("jobs finished", "jobs_finished"),
            ("invariant violations", "violations")]
    print(f"{'figure':28} {'global':>12} {'per_region':>12}")
    for label, key in rows:
        print(f"{label:28} {fmt(out['global'][key]):>12} {fmt(out['per_region'][key]):>12}")
    for band in ("production", "interactive", "batch"):
        vals = [out[m]["useful_chip_hours_by_band"].get(band) for m in ("global", "per_region")]
        print(f"{'useful, ' + band:28} {fmt(vals[0]):>12} {fmt(vals[1]):>12}")
        for q in ("p50", "p90"):
            vals = [out[m][f"queue_hours_{q}"].get(band) for m in ("global", "per_region")]
            print(f"{'queue ' + q + ' (h), ' + band:28} {fmt(vals[0]):>12} {fmt(vals[1]):>12}")
    print(f"upper bound: {fmt(bound['chip_hours'])} chip-hours "
          f"(capacity offered {fmt(bound['capacity_chip_hours'])})")
    for m in ("global", "per_region"):
        print(f"{m}: scheduler ms/pass by hosts {out[m]['pass_ms_by_fleet']}; "
              f"simulated in {wall[m]} s ({cpu[m]} s of CPU)")


if __name__ == "__main__":
    main()
