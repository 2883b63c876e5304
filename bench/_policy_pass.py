"""The 10k-host scheduling pass with accelerator fallbacks and budgets on vs off (issue 20).

Part of bench/gang.py. The same synthetic fleet and 100,000 pending tasks as
`schedule_pass_10k_s` (bench/gang.py), passed twice to the real `schedule()`:

- off: as built;
- on: every TPU job asks with a fallback whose preferred type the fleet does not have
  (single-host "v6e-4,v5litepod-4", gangs "v6e-16,v5litepod-16"), so each is tried on the
  missing type first; and 10 of the 50 users are over budget (their work placed as batch
  and its reasons rewritten).

Figures: policy_pass_off_s / policy_pass_on_s (median wall time of `repeat` passes each,
interleaved so load spikes hit both), policy_pass_slowdown (on / off), and the same in CPU
time of this process (policy_pass_*_cpu_s, policy_pass_slowdown_cpu), which other
engineers' runs on a shared machine disturb less. Asserts nothing.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections import Counter

from iris.base.clock import SYSTEM_CLOCK
from iris.base.resources import Resources
from iris.controller.scheduling.model import TaskDemand
from iris.controller.scheduling.scheduler import SchedulerConfig, schedule

_FALLBACK = {"v5litepod-4": "v6e-4,v5litepod-4", "v5litepod-16": "v6e-16,v5litepod-16"}


def with_fallbacks(pending: list[TaskDemand]) -> list[TaskDemand]:
    """The same tasks, TPU ones asking for a missing type first (one Resources per kind, as
    a job's tasks share their spec's)."""
    swapped: dict[int, Resources] = {}
    out = []
    for t in pending:
        res = t.resources
        if res.tpu in _FALLBACK:
            if id(res) not in swapped:
                swapped[id(res)] = dataclasses.replace(res, tpu=_FALLBACK[res.tpu])
            t = dataclasses.replace(t, resources=swapped[id(res)])
        out.append(t)
    return out


def bench_policy_pass(hosts: list, pending: list[TaskDemand], repeat: int) -> dict:
    on_pending = with_fallbacks(pending)
    demoted = {f"user{i}": f"user{i} is over budget (900 of 800 accelerator-hours in 7 days)"
               for i in range(0, 50, 5)}
    on_config = SchedulerConfig(demoted=demoted)
    off, on, cpu, plans = [], [], {"off": [], "on": []}, {}
    for _ in range(repeat):
        for name, tasks, config, times in (("off", pending, None, off),
                                           ("on", on_pending, on_config, on)):
            t0, c0 = SYSTEM_CLOCK.monotonic(), time.process_time()
            plans[name] = schedule(hosts, tasks, config=config)
            times.append(SYSTEM_CLOCK.monotonic() - t0)
            cpu[name].append(time.process_time() - c0)
    for name in ("off", "on"):
        plan = plans[name]
        codes = Counter(r.code.value for r in plan.reasons.values())
        print(f"policy pass {name}: {len(plan.assignments)} assigned, "
              f"{len(plan.gang_requests)} gang asks, reasons {dict(codes)}")
    off_s, on_s = statistics.median(off), statistics.median(on)
    print(f"policy pass: fallbacks and budgets off {off_s:.3f} s, on {on_s:.3f} s "
          f"({on_s / off_s:.2f}x; passes off {', '.join(f'{t:.3f}' for t in off)}, "
          f"on {', '.join(f'{t:.3f}' for t in on)})")
    off_cpu, on_cpu = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    print(f"  in CPU time: off {off_cpu:.3f} s, on {on_cpu:.3f} s ({on_cpu / off_cpu:.2f}x)")
    return {"policy_pass_off_s": round(off_s, 4), "policy_pass_on_s": round(on_s, 4),
            "policy_pass_slowdown": round(on_s / off_s, 3),
            "policy_pass_off_cpu_s": round(off_cpu, 4), "policy_pass_on_cpu_s": round(on_cpu, 4),
            "policy_pass_slowdown_cpu": round(on_cpu / off_cpu, 3)}


def main(repeat: int = 3, n_hosts: int = 10_000, n_pending: int = 100_000) -> dict:
    from bench.gang import build_fleet, build_pending

    rng = random.Random(6)
    hosts = build_fleet(n_hosts, rng)
    return bench_policy_pass(hosts, build_pending(n_pending, rng), repeat)


if __name__ == "__main__":
    import json

    print(json.dumps(main()))
