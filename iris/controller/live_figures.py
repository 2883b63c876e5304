"""The day-trace simulator's figures, kept for the running cluster. Pure: no clock, no I/O.

Not the sampler (the controller's tick feeds it, figures_feed.py) and not a page. State
plus `handle(state, event, now)`, like the job kernel; `now` is wall-clock epoch seconds,
so every time it hands out means the same to a dashboard in another process.

What it keeps (since the controller started; nothing here is persisted):
- utilization over time: a point every SAMPLE_EVERY_S with, per (accelerator, region),
  units busy and units up. A unit is a chip on accelerator hosts (TPU chips, GPUs) and a
  core on CPU-only hosts (accelerator "cpu"); busy is what running attempts asked for,
  capped at the host's own. The last WINDOW_S (24 h) of points, in a bounded ring;
- fragmentation, with each point: free chips that no pending gang can use. A multi-host
  gang takes whole idle slices of its type, so once any gang waits, every free chip on a
  slice that is partly busy, or of a type no waiting gang asks for, is stranded (the
  simulator's definition, bench/_daytrace/cluster.py);
- queue time by priority band: how long each attempt waited from the moment its task
  became pending (the submit for a first attempt; the end of its previous attempt for a
  retry or a requeue) until it was assigned; p50 / p90 over the last WINDOW_S;
- preemptions and wasted accelerator-hours: every attempt that ended evicted (PREEMPTED:
  a higher band took its room, or the cloud's notice) or lost with its machine
  (WORKER_FAILED) is one preemption. Its work since the last checkpoint is lost; Iris is
  not told when a job checkpoints, so the attempt's whole run (started to ended) counts,
  an upper bound on the true loss (a job checkpointing every C seconds loses at most C).
  Gang members stopped because another member was evicted lose their run too, and count
  as waste but not as preemptions. Wasted chip-hours = chips x lost hours.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

SAMPLE_EVERY_S = 10.0
"""One point per 10 s: the simulator's resolution is a minute, and 8,640 points of a handful
of pools each (24 h) cost well under 10 MB in the ring."""
WINDOW_S = 24 * 3600.0
"""A day: capacity shifts with the hour of the day (the blog's Figure 1)."""
MAX_QUEUE_SAMPLES = 20_000
"""Queue times kept per band: a busy day starts ~10,000 attempts; older ones beyond this fall
out even inside the window (percentiles of the newest 20,000)."""
MAX_POINTS = 360
"""A series is averaged down to at most this many points for a page (one per 2 px of a
720 px chart)."""
BANDS = ("production", "interactive", "batch")


@dataclass(frozen=True, slots=True)
class HostSample:
    """One worker at a sampling instant: its pool, slice, units (chips or cores) and use."""

    accelerator: str            # "v5litepod-16", "H100", or "cpu" for a CPU-only host
    region: str
    slice_id: str               # the host's slice; a host outside any slice is its own
    units: float
    busy: float
    idle: bool                  # nothing runs on it


# ---------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Sample:
    """The fleet now; `wanted`: accelerator types of the multi-host gangs that wait."""

    hosts: tuple[HostSample, ...]
    wanted: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Queued:
    """An attempt was assigned after its task waited `waited_s` in `band`."""

    band: str
    waited_s: float


@dataclass(frozen=True, slots=True)
class WorkLost:
    """An attempt ended and its run is lost. `cause`: "evicted", "machine_lost", or
    "gang_restart" (a sibling's eviction stopped it: waste, not a preemption)."""

    cause: str
    chips: int
    run_s: float


Event = Sample | Queued | WorkLost
PREEMPTION_CAUSES = ("evicted", "machine_lost")


@dataclass
class FiguresState:
    every_s: float = SAMPLE_EVERY_S
    window_s: float = WINDOW_S
    points: deque = field(default_factory=deque)       # (at, {(accel, region): (busy, up)}, frag)
    queued: dict[str, deque] = field(default_factory=dict)  # band -> (at, waited_s)
    preemptions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        PREEMPTION_CAUSES, 0))
    wasted_chip_s: float = 0.0
    last_sample: float = float("-inf")
    # queue_times() sorts up to 60,000 waits: the snapshot asks every 0.5 s, so the result is
    # kept until a wait is added or a sampling interval passes (the window moves).
    queue_memo: tuple = ()  # (waits added, interval number, result)
    queue_added: int = 0

    def __post_init__(self) -> None:
        self.points = deque(self.points, maxlen=int(self.window_s / self.every_s) + 1)


def due(state: FiguresState, now: float) -> bool:
    """Is a Sample due? (The feeder builds one only then: it walks every worker.)"""
    return now - state.last_sample >= state.every_s


def handle(state: FiguresState, event: Event, now: float) -> FiguresState:
    if isinstance(event, Sample):
        pools, frag = _measure(event)
        state.points.append((now, pools, frag))
        state.last_sample = now
    elif isinstance(event, Queued):
        ring = state.queued.setdefault(event.band, deque(maxlen=MAX_QUEUE_SAMPLES))
        ring.append((now, max(0.0, event.waited_s)))
        state.queue_added += 1
    elif isinstance(event, WorkLost):
        if event.cause in state.preemptions:
            state.preemptions[event.cause] += 1
        state.wasted_chip_s += event.chips * max(0.0, event.run_s)
    else:
        raise TypeError(f"unknown figures event {type(event).__name__}")
    return state


def _measure(sample: Sample) -> tuple[dict[tuple[str, str], tuple[float, float]], int]:
    pools: dict[tuple[str, str], list[float]] = {}
    slices: dict[str, list[HostSample]] = {}
    for h in sample.hosts:
        acc = pools.setdefault((h.accelerator, h.region), [0.0, 0.0])
        acc[0] += min(h.busy, h.units)
        acc[1] += h.units
        if h.accelerator != "cpu":
            slices.setdefault(h.slice_id, []).append(h)
    frag = 0.0
    if sample.wanted:
        for members in slices.values():
            whole = all(h.idle for h in members) and members[0].accelerator in sample.wanted
            if not whole:
                frag += sum(max(0.0, h.units - h.busy) for h in members)
    return {k: (v[0], v[1]) for k, v in pools.items()}, int(frag)


# ---------------------------------------------------------------------------- views


def summary(state: FiguresState, now: float) -> dict:
    """Now's figures (the newest point) and the counters: for /metrics and the page's head."""
    last = state.points[-1] if state.points else None
    pools = [] if last is None else [
        {"accelerator": a, "region": r, "busy": busy, "up": up,
         "utilization": round(busy / up, 4) if up else None}
        for (a, r), (busy, up) in sorted(last[1].items())]
    return {
        "at": now, "every_s": state.every_s, "window_s": state.window_s,
        "sampled_at": last[0] if last else None, "pools": pools,
        "fragmented_chips": last[2] if last else None,
        "queue": queue_times(state, now),
        "preemptions": dict(state.preemptions),
        "wasted_chip_hours": round(state.wasted_chip_s / 3600.0, 6),
    }


def queue_times(state: FiguresState, now: float) -> dict[str, dict]:
    """Per band (every band, also those with no sample): p50, p90 (None if none), count, sum."""
    key = (state.queue_added, int(now // state.every_s))
    if state.queue_memo and state.queue_memo[:2] == key:
        return state.queue_memo[2]
    out = {}
    for band in (*BANDS, *sorted(b for b in state.queued if b not in BANDS)):
        waits = sorted(w for at, w in state.queued.get(band, ()) if at >= now - state.window_s)
        out[band] = {"p50_s": _quantile(waits, 0.5), "p90_s": _quantile(waits, 0.9),
                     "count": len(waits), "sum_s": round(sum(waits), 3)}
    state.queue_memo = (*key, out)
    return out


def series(state: FiguresState, now: float, hours: float, max_points: int = MAX_POINTS) -> dict:
    """The last `hours` of points, averaged down to at most `max_points` per series: per pool
    [at, busy, up, utilization], and [at, fragmented chips]."""
    since = now - hours * 3600.0
    pts = [p for p in state.points if p[0] >= since]
    keys = sorted({k for _, pools, _ in pts for k in pools})
    groups = _buckets(pts, max_points)
    pools = []
    for a, r in keys:
        rows = []
        for g in groups:
            busy = sum(p[1].get((a, r), (0.0, 0.0))[0] for p in g) / len(g)
            up = sum(p[1].get((a, r), (0.0, 0.0))[1] for p in g) / len(g)
            rows.append([g[-1][0], round(busy, 3), round(up, 3),
                         round(busy / up, 4) if up else None])
        pools.append({"accelerator": a, "region": r, "points": rows})
    frag = [[g[-1][0], round(sum(p[2] for p in g) / len(g), 1)] for g in groups]
    return {"now": now, "hours": hours, "every_s": state.every_s, "pools": pools,
            "fragmented_chips": frag}


def _buckets(points: Sequence, max_points: int) -> list[list]:
    if not points:
        return []
    size = -(-len(points) // max_points)  # ceil
    return [list(points[i:i + size]) for i in range(0, len(points), size)]


def _quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (a value that occurred), None for no values."""
    if not sorted_values:
        return None
    rank = max(1, -(-int(q * 1000) * len(sorted_values) // 1000))
    return round(sorted_values[min(rank, len(sorted_values)) - 1], 3)

