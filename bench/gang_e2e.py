"""Gang jobs end to end through the controller, Region actors in other processes (issue 32
item 4), alone so that `bench.ab` can pair it:

    python -m bench.gang_e2e [--quick] [--gangs N] [--in-process] [--profile DIR] [--ray]
    python -m bench.ab main HEAD gang_e2e --rounds 3 --args "--gangs 600"

What is timed is bench/_gang_controller.py's `bench_gangs_controller`: `--gangs` one-slice
v5litepod-16 gang jobs (4 tasks each) submitted at once to a real Controller actor, then
half as many two-slice ones on a fresh controller; figures are gangs whose tasks are all
assigned per second of wall time, and the Controller actor thread's CPU per gang (the
figure a loaded machine moves least). The three Region actors run in processes of their
own (`ControllerConfig.region_actors`) unless `--in-process`; then their CPU per gang is
printed too. `--profile DIR`: cProfile of the Controller thread for each of the two runs
(DIR/one.prof, DIR/multi.prof; read with `python -m pstats`). `--ray`: Ray placement
groups of the same shapes in the same run (bench/_gang_actors.py). `--quick`: 300 gangs.

The last line printed is one JSON object of every figure.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bench._gang_controller import bench_gangs_controller
from bench._report import peer_installed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 gangs (the default: 600)")
    parser.add_argument("--gangs", type=int, default=None)
    parser.add_argument("--in-process", action="store_true",
                        help="the Region actors in the controller's process (the old bench)")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--ray", action="store_true", help="Ray placement groups too")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    n = args.gangs or (300 if args.quick else 600)
    remote = not args.in_process
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    result: dict = {"load_1m": round(os.getloadavg()[0], 1)}
    for slices, name in ((1, "one"), (2, "multi")):
        prof = args.profile / f"{name}.prof" if args.profile else None
        result.update(bench_gangs_controller(n, args.timeout, slices, remote, prof))
        pre = "multislice_" if slices > 1 else ""
        print(f"{slices}-slice gang jobs through the controller ({'remote' if remote else 'in-process'}"
              f" regions): {result[pre + 'controller_gangs_placed']} placed in "
              f"{result[pre + 'controller_place_s']:.2f} s, "
              f"{result[pre + 'controller_cpu_ms_per_gang']} ms controller CPU a gang", flush=True)
    if args.ray and peer_installed():
        from bench._gang_actors import bench_ray_placement_groups

        result.update(bench_ray_placement_groups(n))
        result.update(bench_ray_placement_groups(n // 2, slices=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
