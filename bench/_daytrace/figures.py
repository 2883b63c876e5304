"""The figures of a simulated day, the offline upper bounds, and the plot. No simulation here.

Upper bound (`upper_bound`): an offline, clairvoyant relaxation that no scheduler can beat.
Per minute, accelerator chips busy <= min(capacity offered that minute, chips of every
accelerator task submitted so far); and a job of w chips per task x n tasks arriving at a
with d seconds of work does at most w*n*min(d, T - a) by the horizon T. The bound is the
smaller of the two sums. It ignores boot time, slice shapes, regions, gang wholeness and
preemption loss, so it is loose exactly where those cost.

Boot-aware upper bound (`booted_bound`), tighter, and still an upper bound for ANY
scheduler on the simulated provider. Claim: the TPU hosts READY in region r at a tick t
are at most min(cap_r(s) for s in [t - boot, t]), where cap_r is the capacity the
provider enforces (the trace's value at the latest tick <= s; world.py applies capacity
events at ticks). Proof: (1) the SimulatedProvider makes a slice READY exactly `boot`
seconds after its create, so a slice READY at t was created at some c <= t - boot;
(2) a slice once PREEMPTED or deleted never comes back, so it was alive (CREATING or
READY) at every tick of [c, t], hence of [t - boot, t]; (3) at every tick s, after the
capacity step, the hosts of alive slices in r are <= cap_r(s): a create is refused when
the hosts held (alive or preempted, not yet deleted) plus the new slice exceed the
capacity, and a capacity drop preempts slices until the alive ones fit (world.py
`_set_capacity`). So the READY hosts at t all belong to slices alive at each tick s of
the window, and number <= cap_r(s) for each such s. Work runs only on READY hosts, which
a cluster sees at ticks, so the chip-seconds of work in [t, t + tick) are <= chips of
sum_r min-over-window cap_r, also <= the width submitted by t; the total is capped by each
job's own work as above. It charges boot time only where capacity appears (it still
ignores shapes, regions, re-creates after preemptions and preemption loss).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from bench._daytrace.trace import CHIPS_PER_HOST, Trace
from bench._daytrace.world import Run

HOUR = 3600.0


def upper_bound(trace: Trace, step_s: float = 60.0) -> dict:
    horizon = trace.horizon_s
    caps = sorted(trace.capacity, key=lambda c: c.t)
    jobs = [j for j in trace.jobs if j.chips_per_task]
    width = {j.id: j.chips_per_task * j.replicas * j.resources.gang_size for j in jobs}
    total_work = sum(width[j.id] * min(j.duration_s, max(0.0, horizon - j.t)) for j in jobs)
    offered: dict[str, int] = {}
    ci = ji = 0
    arrived = 0
    chip_s = 0.0
    series = []
    t = 0.0
    while t < horizon:
        while ci < len(caps) and caps[ci].t <= t:
            offered[caps[ci].region] = caps[ci].hosts
            ci += 1
        while ji < len(jobs) and jobs[ji].t <= t:
            arrived += width[jobs[ji].id]
            ji += 1
        busy = min(CHIPS_PER_HOST * sum(offered.values()), arrived)
        chip_s += busy * step_s
        series.append((t, busy))
        t += step_s
    return {"chip_hours": min(chip_s, total_work) / HOUR, "series": series,
            "capacity_chip_hours": _capacity_chip_s(trace, step_s) / HOUR}


def booted_bound(trace: Trace, boot_s: float, tick_s: float) -> dict:
    """The boot-aware upper bound (module docstring): chip-hours, and (t, chips) per tick."""
    horizon = trace.horizon_s
    jobs = [j for j in trace.jobs if j.chips_per_task]
    width = {j.id: j.chips_per_task * j.replicas * j.resources.gang_size for j in jobs}
    total_work = sum(width[j.id] * min(j.duration_s, max(0.0, horizon - j.t)) for j in jobs)
    window = int(round(boot_s / tick_s))
    caps = sorted(trace.capacity, key=lambda c: c.t)
    ticks = int(horizon // tick_s)
    # cap[r][k]: hosts the provider allows in r after the capacity step of tick k
    cap = {r: [0] * ticks for r in trace.regions}
    ci, now = 0, dict.fromkeys(trace.regions, 0)
    for k in range(ticks):
        while ci < len(caps) and caps[ci].t <= k * tick_s:
            now[caps[ci].region] = caps[ci].hosts
            ci += 1
        for r in trace.regions:
            cap[r][k] = now[r]
    ji, arrived, chip_s, series = 0, 0, 0.0, []
    for k in range(ticks):
        while ji < len(jobs) and jobs[ji].t <= k * tick_s:
            arrived += width[jobs[ji].id]
            ji += 1
        ready = sum(min(cap[r][k - window:k + 1]) if k >= window else 0 for r in trace.regions)
        busy = min(CHIPS_PER_HOST * ready, arrived)
        chip_s += busy * tick_s
        series.append((k * tick_s, busy))
    return {"chip_hours": min(chip_s, total_work) / HOUR, "series": series}


def _capacity_chip_s(trace: Trace, step_s: float) -> float:
    caps = sorted(trace.capacity, key=lambda c: c.t)
    offered: dict[str, int] = {}
    ci, t, total = 0, 0.0, 0.0
    while t < trace.horizon_s:
        while ci < len(caps) and caps[ci].t <= t:
            offered[caps[ci].region] = caps[ci].hosts
            ci += 1
        total += CHIPS_PER_HOST * sum(offered.values()) * step_s
        t += step_s
    return total


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def summarize(run: Run, horizon: float) -> dict:
    """The figures of one run (chip-hours, hours and counts; see the module docstring of
    bench/daytrace.py for what each means)."""
    waits: dict[str, list[float]] = {}
    gang_waits = []
    for job in run.jobs:
        if job.job.t >= horizon:
            continue
        start = job.first_start if job.first_start is not None else horizon
        wait = (start - job.job.t) / HOUR
        waits.setdefault(job.band.name.lower(), []).append(wait)
        if job.is_gang:
            gang_waits.append(wait)
    samples = run.samples
    useful = {b: v / HOUR for b, v in sorted(run.work.useful.items())}
    acc_useful = {b: v for b, v in useful.items()}
    passes = run.pass_times
    frag = [s["fragmented_chips"] for s in samples]
    return {
        "useful_chip_hours": round(sum(acc_useful.values()), 1),
        "useful_chip_hours_by_band": {b: round(v, 1) for b, v in acc_useful.items()},
        "wasted_chip_hours": round(run.work.wasted / HOUR, 1),
        "preemptions": run.work.preemptions,
        "evictions": run.work.evictions,
        "slices_mean": round(statistics.fmean(s["busy_slices"] for s in samples), 1),
        "slices_max": max(s["busy_slices"] for s in samples),
        "busy_chips_mean": round(statistics.fmean(s["busy_chips"] for s in samples), 1),
        "queue_hours_p50": {b: _round(_pct(v, 50)) for b, v in sorted(waits.items())},
        "queue_hours_p90": {b: _round(_pct(v, 90)) for b, v in sorted(waits.items())},
        "gang_wait_hours_p90": _round(_pct(gang_waits, 90)),
        "fragmented_chips_mean": round(statistics.fmean(frag), 1) if frag else 0.0,
        "jobs_started": sum(1 for j in run.jobs if j.first_start is not None),
        "jobs_finished": sum(1 for j in run.jobs if j.finished_at is not None),
        "passes": len(passes),
        "pass_ms_by_fleet": _pass_ms_by_fleet(passes),
        "violations": len(run.violations),
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _pass_ms_by_fleet(passes: Sequence[tuple[int, int, float]]) -> dict[str, float]:
    """Median ms per scheduling pass, by the number of hosts the pass saw (bins of 2x)."""
    bins: dict[int, list[float]] = {}
    for hosts, _, seconds in passes:
        b = 1
        while b * 2 <= max(hosts, 1):
            b *= 2
        bins.setdefault(b, []).append(seconds * 1000)
    return {f"{b}-{2 * b - 1}": round(statistics.median(v), 2) for b, v in sorted(bins.items())}


def plot(path: str, runs: dict[str, Run], bound: dict, booted: dict, title: str) -> None:
    import matplotlib  # only the plot needs it (the bench extra); the simulation does not

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True, dpi=80)
    some = next(iter(runs.values())).samples
    hours = [s["t"] / HOUR for s in some]
    top.fill_between(hours, [s["capacity_chips"] for s in some], step="post", alpha=0.15,
                     color="grey", label="capacity offered")
    ub = bound["series"]
    top.plot([t / HOUR for t, _ in ub], [b for _, b in ub], color="black", lw=1,
             ls="--", label="upper bound")
    top.plot([t / HOUR for t, _ in booted["series"]], [b for _, b in booted["series"]],
             color="black", lw=0.8, ls=":", label="boot-aware upper bound")
    for name, r in runs.items():
        top.plot(hours, [s["busy_chips"] for s in r.samples], lw=1.5, label=name)
        bottom.plot(hours, [s["busy_slices"] for s in r.samples], lw=1.5, label=name)
    top.set_ylabel("TPU chips busy")
    bottom.set_ylabel("concurrent TPU slices busy")
    bottom.set_xlabel("hour of the simulated day (UTC)")
    top.set_title(title)
    top.legend(loc="upper right", fontsize=8)
    bottom.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
