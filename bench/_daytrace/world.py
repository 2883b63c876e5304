"""The simulated day: a fake clock, a SimulatedProvider whose zones follow the trace's
capacity, and one or more Clusters stepping through it. No sockets, no sleeps.

`run(trace, mode)`: mode "global" is one Cluster over every region (Iris); "per_region" is
one independent Cluster per region, each job going to the region its user picked (a Ray
cluster per region). Same trace, same provider seed, same tick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench._daytrace.cluster import Cluster
from bench._daytrace.trace import Trace
from bench._daytrace.work import JobRun, Ledger, make_job
from iris.base.clock import FakeClock
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import SliceState
from iris.controller.providers.simulated import SimulatedProvider
from iris.controller.regions.autoscaler import AutoscalerConfig
from iris.controller.scheduling.scheduler import SchedulerConfig

# The controller runs a pass whenever something changed (every second or so); 30 s of
# simulated time per step keeps a day at 2,880 steps and is far below a slice's boot time.
TICK_S = 30.0
SAMPLE_S = 300.0  # figures over the day are sampled every 5 min
# Creating a v5e slice and booting its workers takes minutes on GCP; 3 min is the fast end.
BOOT_S = 180.0
# Besides the trace's waves, each preemptible slice lives ~20 h on average (GCP preemptible
# VMs live at most 24 h), so long gangs meet a preemption now and then.
PREEMPTIONS_PER_HOUR = 0.05
# (suffix, accelerator, hosts per slice, scale-up priority). v5litepod-4 single-host slices
# get priority so single-host tasks grow their own pool, not the gangs' slices.
TPU_GROUPS = (("v5e4", "v5litepod-4", 1, 1), ("v5e16", "v5litepod-16", 4, 0),
              ("v5e32", "v5litepod-32", 8, 0), ("v5e64", "v5litepod-64", 16, 0))
MAX_SLICES = 400  # per group: the cloud's capacity is the limit, not the config


def tpu_zone(region: str) -> str:
    return f"{region}-b"


def scale_groups(regions: tuple[str, ...]) -> dict[str, list[ScaleGroupConfig]]:
    out = {}
    for r in regions:
        gs = [ScaleGroupConfig(f"{r}-{suffix}", r, "tpu", acc, hosts, 4, (tpu_zone(r),),
                               max_slices=MAX_SLICES, priority=prio, provider="simulated")
              for suffix, acc, hosts, prio in TPU_GROUPS]
        gs.append(ScaleGroupConfig(f"{r}-cpu", r, "cpu", None, 1, 0, (f"{r}-a",),
                                   max_slices=MAX_SLICES, preemptible=False,
                                   provider="simulated"))
        out[r] = gs
    return out


@dataclass
class Run:
    mode: str
    work: Ledger
    jobs: list[JobRun]
    clusters: dict[str, Cluster]
    samples: list[dict[str, float]] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return [v for c in self.clusters.values() for v in c.hosts.violations]

    @property
    def pass_times(self) -> list[tuple[int, int, float]]:
        return [p for c in self.clusters.values() for p in c.pass_times]


def run(trace: Trace, mode: str, *, seed: int = 0,
        autoscaler: AutoscalerConfig | None = None,
        scheduler: SchedulerConfig | None = None,
        observe: Callable[[float, Run, SimulatedProvider, dict[str, int]], None] | None = None
        ) -> Run:
    """`observe(now, run, provider, offered hosts by region)` is called after every step
    (the --diagnose breakdown, diagnose.py); it must not change anything."""
    if mode not in ("global", "per_region"):
        raise ValueError(f"mode: global or per_region, got {mode!r}")
    clock = FakeClock(start=0.0)
    provider = SimulatedProvider(clock, boot_delay_s=BOOT_S,
                                 zone_capacity={tpu_zone(r): 0 for r in trace.regions},
                                 preemption_rate_per_hour=PREEMPTIONS_PER_HOUR, seed=seed)
    work = Ledger()
    groups = scale_groups(trace.regions)
    config = autoscaler or AutoscalerConfig(hosts_register=False)
    if mode == "global":
        clusters = {"global": Cluster("global", groups, provider, work, config, scheduler)}
    else:
        clusters = {r: Cluster(r, {r: groups[r]}, provider, work, config, scheduler)
                    for r in trace.regions}
    jobs = [make_job(j) for j in trace.jobs]
    result = Run(mode, work, jobs, clusters)
    caps, arrivals = list(trace.capacity), list(jobs)
    ci = ji = 0
    offered = dict.fromkeys(trace.regions, 0)
    steps = int(trace.horizon_s // TICK_S)
    for k in range(steps + 1):
        now = k * TICK_S
        clock.advance(now - clock.monotonic())
        while ci < len(caps) and caps[ci].t <= now:
            offered[caps[ci].region] = caps[ci].hosts
            taken = _set_capacity(provider, tpu_zone(caps[ci].region), caps[ci].hosts)
            for c in clusters.values():
                c.dropped.update(taken)
            ci += 1
        while ji < len(arrivals) and arrivals[ji].job.t <= now:
            job = arrivals[ji]
            clusters["global" if mode == "global" else job.job.region].submit(job)
            ji += 1
        for c in clusters.values():
            c.step(now)
        if now % SAMPLE_S == 0:
            result.samples.append(_sample(now, clusters, offered))
        if observe is not None:
            observe(now, result, provider, offered)
    for c in clusters.values():
        c.horizon(trace.horizon_s)
    return result


def _set_capacity(provider: SimulatedProvider, zone: str, hosts: int) -> list[str]:
    """The cloud now lets `zone` hold `hosts` hosts; above that it takes slices back,
    newest first (a preemption wave). Returns the slices taken."""
    provider.set_capacity(zone, hosts)
    alive = [s for s in provider.list_slices() if s.zone == zone
             and s.state in (SliceState.CREATING, SliceState.READY)]
    held = sum(len(s.hosts) for s in alive)
    taken = []
    for s in reversed(alive):
        if held <= hosts:
            break
        provider.preempt(s.slice_id)
        taken.append(s.slice_id)
        held -= len(s.hosts)
    return taken


def _sample(now: float, clusters: dict[str, Cluster], offered: dict[str, int]) -> dict:
    out = {"t": now, "capacity_chips": 4 * sum(offered.values())}
    for c in clusters.values():
        for k, v in c.sample().items():
            out[k] = out.get(k, 0) + v
    return out
