"""A day trace: capacity events and job arrivals, as JSON lines; and the default generated day.

Not the simulation (cluster.py, world.py). The format (docs/daytrace.md has the full text):

    {"kind": "meta", "regions": ["us-central2", ...], "hours": 24, "seed": 1}
    {"kind": "capacity", "t": 0, "region": "us-central2", "hosts": 120}
    {"kind": "job", "t": 60, "id": "j17", "user": "alice", "region": "us-central2",
     "band": "batch", "accelerator": "v5litepod-32", "replicas": 1, "cpu": 8,
     "duration_s": 14400, "checkpoint_s": 1800}

`t` is seconds from the start of the day. A capacity event sets how many TPU hosts
(4 chips each) the cloud lets a region's TPU zone hold from then on; a drop below what is
held is a preemption wave (the newest slices go first). `accelerator` is a TPU slice type
("v5litepod-16": a gang of 4 hosts; "v5litepod-4": one host) or "cpu". `region` is where
the user would have put the job on a cluster per region; the global scheduler ignores it.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

from iris.base.errors import InvalidRequestError
from iris.base.resources import Resources
from iris.controller.scheduling.model import Band

REGION_NAMES = ("us-central2", "europe-west4", "us-east1", "us-west4", "asia-northeast1",
                "europe-west1")
CHIPS_PER_HOST = 4  # every v5litepod host of a multi-host slice


@dataclass(frozen=True)
class Capacity:
    t: float
    region: str
    hosts: int


@dataclass(frozen=True)
class Job:
    t: float
    id: str
    user: str
    region: str
    band: str
    accelerator: str
    replicas: int
    cpu: float
    duration_s: float
    checkpoint_s: float

    @property
    def resources(self) -> Resources:
        if self.accelerator == "cpu":
            return Resources(cpu=self.cpu)
        return Resources(cpu=self.cpu, tpu=self.accelerator)

    @property
    def chips_per_task(self) -> int:
        r = self.resources
        shape = r.tpu_slice
        if shape is None:
            return 0
        return shape.chips_per_host if shape.hosts > 1 else shape.chips


@dataclass
class Trace:
    regions: tuple[str, ...]
    hours: float
    capacity: list[Capacity]
    jobs: list[Job]
    seed: int | None = None

    @property
    def horizon_s(self) -> float:
        return self.hours * 3600.0


# ---- JSON lines ---------------------------------------------------------------------

def dump(trace: Trace) -> Iterator[str]:
    yield json.dumps({"kind": "meta", "regions": list(trace.regions), "hours": trace.hours,
                      "seed": trace.seed})
    for c in trace.capacity:
        yield json.dumps({"kind": "capacity", **asdict(c)})
    for j in trace.jobs:
        yield json.dumps({"kind": "job", **asdict(j)})


def load(lines: Iterable[str], source: str = "trace") -> Trace:
    """Parse a trace; any bad line raises InvalidRequestError naming its line number."""
    meta, capacity, jobs = None, [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            kind = rec.pop("kind")
            if kind == "meta":
                meta = rec
            elif kind == "capacity":
                capacity.append(_capacity(rec))
            elif kind == "job":
                jobs.append(_job(rec))
            else:
                raise ValueError(f"unknown kind {kind!r} (meta, capacity or job)")
        except (ValueError, KeyError, TypeError, AttributeError, InvalidRequestError) as exc:
            raise InvalidRequestError(f"{source} line {n}: {exc}", "trace") from None
    if meta is None:
        raise InvalidRequestError(f"{source}: no meta line (regions, hours)", "trace")
    regions = tuple(map(str, meta["regions"]))
    hours = float(meta["hours"])
    for where in [c.region for c in capacity] + [j.region for j in jobs]:
        if where not in regions:
            raise InvalidRequestError(f"{source}: region {where!r} is not in meta regions "
                                      f"{list(regions)}", "trace")
    if not regions or not hours > 0:
        raise InvalidRequestError(f"{source}: meta needs regions and hours > 0", "trace")
    return Trace(regions, hours, sorted(capacity, key=lambda c: c.t),
                 sorted(jobs, key=lambda j: j.t), meta.get("seed"))


def _capacity(rec: dict) -> Capacity:
    c = Capacity(float(rec["t"]), str(rec["region"]), int(rec["hosts"]))
    if c.t < 0 or c.hosts < 0:
        raise ValueError("capacity: t and hosts must be >= 0")
    return c


def _job(rec: dict) -> Job:
    j = Job(float(rec["t"]), str(rec["id"]), str(rec["user"]), str(rec["region"]),
            str(rec["band"]), str(rec["accelerator"]), int(rec.get("replicas", 1)),
            float(rec.get("cpu", 1)), float(rec["duration_s"]),
            float(rec.get("checkpoint_s", 1800)))
    Band.parse(j.band)
    j.resources  # noqa: B018 - validates the accelerator name
    if j.t < 0 or j.replicas < 1 or not j.duration_s > 0 or not j.checkpoint_s > 0:
        raise ValueError(f"job {j.id}: t >= 0, replicas >= 1, duration_s and checkpoint_s "
                         "> 0 required")
    return j


# ---- the generated day ------------------------------------------------------------------

# Hosts of the whole fleet at once: ~90 v5litepod-16 slices' worth, the blog's fleet / 4 so
# a day simulates in seconds; every figure is a ratio or per-chip, so scale only adds time.
FLEET_HOSTS = 360
# (user, home region index, share of the work). Users camp where they found capacity
# before (the blog: "camping" left other regions idle): four of five live in region 0.
USERS = (("alice", 0, 0.3), ("bob", 0, 0.25), ("carol", 0, 0.2), ("dave", 0, 0.15),
         ("erin", 1, 0.1))
# (accelerator, band, replicas, duration range h, checkpoint s, weight of arrivals)
KINDS = (
    ("v5litepod-16", "batch", 1, (2, 6), 1800, 4),
    ("v5litepod-32", "batch", 1, (3, 8), 1800, 3),
    ("v5litepod-64", "batch", 1, (4, 10), 1800, 1),
    ("v5litepod-16", "interactive", 1, (0.5, 2), 600, 3),
    ("v5litepod-4", "interactive", 4, (0.25, 1.5), 600, 4),
    ("v5litepod-4", "batch", 8, (0.5, 3), 900, 3),
    ("v5litepod-32", "production", 1, (3, 6), 1800, 1),
    ("cpu", "batch", 8, (0.1, 0.5), 600, 3),
    ("cpu", "interactive", 2, (0.1, 0.5), 600, 2),
)


def share(region_index: int, n_regions: int, hour: float) -> float:
    """Relative weight of one region in the fleet at `hour` UTC: the blog's Figure 1 shows
    the mix rotating through the day (capacity recovers overnight, local time), so each
    region peaks at its own hour, spread evenly round the clock."""
    peak = 24.0 * region_index / n_regions + 3.0
    return 1.0 + 0.85 * math.cos(2 * math.pi * (hour - peak) / 24.0)


def generate(seed: int = 1, n_regions: int = 3, hours: float = 24.0,
             load: float = 1.6, fleet_hosts: int = FLEET_HOSTS) -> Trace:
    """The default day. `load`: accelerator work submitted / accelerator capacity offered;
    `fleet_hosts`: TPU hosts of every region together."""
    if not 1 <= n_regions <= len(REGION_NAMES):
        raise InvalidRequestError(f"regions: 1 to {len(REGION_NAMES)}, got {n_regions}",
                                  "regions")
    if not 0 < hours <= 168:
        raise InvalidRequestError(f"hours: more than 0, at most 168, got {hours}", "hours")
    rng = random.Random(seed)
    regions = REGION_NAMES[:n_regions]
    capacity = _capacity_events(rng, regions, hours, fleet_hosts)
    offered = _chip_seconds(capacity, hours * 3600.0)
    return Trace(regions, hours, capacity, _jobs(rng, regions, hours, offered * load), seed)


def _capacity_events(rng: random.Random, regions: tuple[str, ...], hours: float,
                     fleet_hosts: int) -> list[Capacity]:
    """Every 15 min per region: its share of the fleet, +-10% noise; each region also has
    one stock-out (0 hosts for 1-2 h) and two preemption waves (half its hosts gone for
    20-40 min) at random hours."""
    n = len(regions)
    out: list[Capacity] = []
    cuts: dict[str, list[tuple[float, float, float]]] = {}
    for r in regions:
        start = rng.uniform(0, max(0.0, hours - 2)) * 3600
        cuts[r] = [(start, start + rng.uniform(1, 2) * 3600, 0.0)]
        for _ in range(2):
            w = rng.uniform(0, hours) * 3600
            cuts[r].append((w, w + rng.uniform(20, 40) * 60, 0.5))
    step = 900.0
    for k in range(int(hours * 3600 / step)):
        t = k * step
        weights = [share(i, n, t / 3600.0) for i in range(n)]
        total = sum(weights)
        for i, r in enumerate(regions):
            hosts = fleet_hosts * weights[i] / total * rng.uniform(0.9, 1.1)
            for start, end, keep in cuts[r]:
                if start <= t < end:
                    hosts *= keep
            out.append(Capacity(t, r, int(hosts)))
    return out


def _chip_seconds(capacity: list[Capacity], horizon: float) -> float:
    total, last = 0.0, {}
    for c in sorted(capacity, key=lambda c: c.t):
        if c.region in last:
            t0, h = last[c.region]
            total += (c.t - t0) * h * CHIPS_PER_HOST
        last[c.region] = (c.t, c.hosts)
    for t0, h in last.values():
        total += max(0.0, horizon - t0) * h * CHIPS_PER_HOST
    return total


def _jobs(rng: random.Random, regions: tuple[str, ...], hours: float,
          chip_seconds: float) -> list[Job]:
    """Arrivals until `chip_seconds` of accelerator work is submitted: a third queued at the
    start of the day (the backlog a research team always has), the rest spread over it."""
    weights = [k[5] for k in KINDS]
    user_w = [u[2] for u in USERS]
    jobs, submitted, n = [], 0.0, 0
    horizon = hours * 3600.0
    while submitted < chip_seconds:
        acc, band, replicas, (lo, hi), ckpt, _ = rng.choices(KINDS, weights)[0]
        name, home, _ = rng.choices(USERS, user_w)[0]
        t = 0.0 if submitted < chip_seconds / 3 else rng.uniform(0, horizon * 0.9)
        dur = rng.uniform(lo, hi) * 3600
        n += 1
        job = Job(round(t, 1), f"j{n}", name, regions[home % len(regions)], band, acc,
                  replicas, 8.0 if acc != "cpu" else 4.0, round(dur), ckpt)
        jobs.append(job)
        tasks = replicas * (job.resources.gang_size or 1)
        submitted += job.chips_per_task * tasks * dur
    return sorted(jobs, key=lambda j: (j.t, j.id))
