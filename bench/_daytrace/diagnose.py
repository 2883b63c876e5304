"""Where the offered TPU capacity went, step by step (`python -m bench.daytrace --diagnose`).

Not a figure of the policy's quality (figures.py has those), but the breakdown to read when
a figure disappoints. After every simulated step `Diagnosis.observe` (a read-only hook of
`world.run`) splits each region's offered hosts into:

- busy: chips with work on them (some of it wasted later, see below);
- idle_ready: chips of READY slices with nothing on them;
- booting: chips of slices the provider is still creating (3 min each);
- free_no_fit: quota no slice holds, and no waiting TPU work fits it (every waiting gang
  needs more hosts than are free there), or nothing waits;
- free_held_back: quota free, waiting work fits it, and the region's autoscaler holds
  that accelerator back (its zone backing off after a failed create, or a cooldown);
- free_transient: quota free, waiting work fits it and nothing holds it back: the demand
  is routed to another region, or the create is a pass away.

The run's wasted work (lost since the last checkpoint) is split by cause: `drop` (the
trace's capacity fell and the newest slices were taken), `reclaimed` (random preemption),
`evicted` (for a higher band). Chip-hours; percentages are of the capacity offered.
"""

from __future__ import annotations

from bench._daytrace.trace import CHIPS_PER_HOST
from bench._daytrace.world import TICK_S, Run, tpu_zone
from iris.controller.providers.base import SliceState
from iris.controller.providers.simulated import SimulatedProvider

HOUR = 3600.0
PARTS = ("busy", "idle_ready", "booting", "free_no_fit", "free_held_back", "free_transient")


class Diagnosis:
    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self.chip_s = dict.fromkeys(("offered", *PARTS), 0.0)

    def observe(self, now: float, run: Run, provider: SimulatedProvider,
                offered: dict[str, int]) -> None:
        if now >= self.horizon_s:
            return  # the step at the horizon starts no interval of the day
        ready: dict[str, int] = {}
        booting: dict[str, int] = {}
        for s in provider.list_slices():
            if s.state is SliceState.READY:
                ready[s.zone] = ready.get(s.zone, 0) + len(s.hosts)
            elif s.state is SliceState.CREATING:
                booting[s.zone] = booting.get(s.zone, 0) + len(s.hosts)
        busy = _busy_chips(run)
        add = self.chip_s
        for region, hosts in offered.items():
            zone = tpu_zone(region)
            r, b = ready.get(zone, 0), booting.get(zone, 0)
            used = busy.get(region, 0)
            free = max(0, hosts - r - b)
            add["offered"] += CHIPS_PER_HOST * hosts * TICK_S
            add["busy"] += used * TICK_S
            add["idle_ready"] += (CHIPS_PER_HOST * r - used) * TICK_S
            add["booting"] += CHIPS_PER_HOST * b * TICK_S
            if free:
                add[_why_free(run, region, free, now)] += CHIPS_PER_HOST * free * TICK_S

    def report(self, run: Run, upper_bound_chip_hours: float) -> dict:
        offered = self.chip_s["offered"]
        out = {k: round(v / HOUR, 1) for k, v in self.chip_s.items()}
        out["wasted"] = {k: round(v / HOUR, 1) for k, v in sorted(run.work.wasted_by.items())}
        useful = sum(run.work.useful.values()) / HOUR
        out["useful"] = round(useful, 1)
        out["short_of_upper_bound"] = round(upper_bound_chip_hours - useful, 1)
        out["percent_of_offered"] = {
            k: round(100 * v / offered, 2) if offered else None
            for k, v in [*self.chip_s.items(), *((f"wasted_{c}", w) for c, w in
                                                   run.work.wasted_by.items())]
            if k != "offered"}
        return out


def _busy_chips(run: Run) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in run.clusters.values():
        for h in c.hosts.hosts.values():
            if h.capacity.chips and h.tasks:
                out[h.region] = out.get(h.region, 0) + sum(t.job.chips for t in h.tasks.values())
    return out


def _why_free(run: Run, region: str, free_hosts: int, now: float) -> str:
    """Why `free_hosts` of the region's quota hold no slice (see the module docstring)."""
    cluster = run.clusters.get("global") or run.clusters[region]
    fitting = set()
    for t in cluster.pending.values():
        shape = t.job.resources.tpu_slice
        if shape is not None and shape.hosts * t.job.resources.count <= free_hosts:
            fitting.add(shape.name if shape.hosts > 1 else shape.family)
    if not fitting:
        return "free_no_fit"
    held = cluster.autoscalers[region].blocked(now)
    return "free_held_back" if fitting <= set(held) else "free_transient"


def print_report(name: str, report: dict) -> None:
    pct = report["percent_of_offered"]
    print(f"where the offered capacity went ({name}; chip-hours, % of offered):")
    print(f"  {'offered':22} {report['offered']:>10,.0f}")
    for k in PARTS:
        print(f"  {k:22} {report[k]:>10,.0f} {pct[k]:>7.2f}%")
    for cause, v in report["wasted"].items():
        print(f"  {'wasted, ' + cause:22} {v:>10,.0f} {pct['wasted_' + cause]:>7.2f}%")
    print(f"  {'useful':22} {report['useful']:>10,.0f}   short of the upper bound by "
          f"{report['short_of_upper_bound']:,.0f}")
