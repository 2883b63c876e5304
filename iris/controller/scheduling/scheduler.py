"""One scheduling pass: pending tasks + hosts in, assignments, evictions, gang asks and reasons out.

Pure placement: no sockets, no threads, no clock. The order is policy:

- bands first: production, then interactive, then batch; only lower bands are evicted;
- within a band, fair share: the user with the smallest dominant share (cpu, memory or
  accelerators, running plus assigned this pass) goes next, one task or gang at a time;
- no head-of-line blocking: a task that does not fit gets a reason and the pass moves on;
- per-worker back-pressure: a worker gets at most its `launch_slots` new attempts.

Speed (10,000 hosts x 100,000 pending tasks in well under a second): tasks with the same
pool, per-host demand and constraints share a class; each class keeps a cursor into its
candidate hosts and never looks back, because free capacity only shrinks during a pass;
once a class has no room, every further task of it gets the same reason in O(1).
`iris job run --dry-run` calls `schedule` with the job's tasks to answer "where would it go".
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from iris.base.resources import human_bytes
from iris.controller.scheduling.constraints import Constraint
from iris.controller.scheduling.fallbacks import Alternatives, combined_reason, demoted_reason
from iris.controller.scheduling.fleet import Fleet, Pool
from iris.controller.scheduling.gang_placement import GangRequest, GangSteps, task_pool
from iris.controller.scheduling.model import (
    Band,
    Demand,
    HostView,
    Quota,
    TaskDemand,
    per_host_demand,
)
from iris.controller.scheduling.preemption import Preemption, Preemptor
from iris.controller.scheduling.reasons import PendingReason, ReasonCode


@dataclass(frozen=True)
class SchedulerConfig:
    # Regions asked at once per gang: each holds a slice until the coordinator decides, so
    # asking every region of a large fleet would idle capacity for nothing.
    max_gang_regions: int = 3
    # Evictions per pass: bounds churn after a burst of production work and the O(hosts)
    # victim search per evicting task; the next pass (seconds later) continues.
    max_preemptions_per_pass: int = 256
    quotas: Mapping[str, Quota] = field(default_factory=dict)
    # user -> why they are over their budget ("alice is over budget (812 of 800
    # accelerator-hours in 7 days)"): their pending work is placed as batch and told so.
    demoted: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Assignment:
    task_id: str
    job_id: str
    host_id: str
    accelerator: str | None = None  # the TPU alternative chosen (jobs with fallbacks)


@dataclass
class SchedulePlan:
    assignments: list[Assignment]
    preemptions: list[Preemption]
    gang_requests: list[GangRequest]
    reasons: dict[str, PendingReason]  # task id -> why it is still pending


def schedule(hosts: Sequence[HostView] | Fleet, pending: Sequence[TaskDemand], *,
             config: SchedulerConfig | None = None, reserving_gangs: Collection[str] = (),
             scaling_up: Mapping[str, Sequence[str]] | None = None,
             now: float | None = None) -> SchedulePlan:
    """One pass. `reserving_gangs`: gangs the coordinator is already placing.
    `scaling_up`: accelerator (or "cpu") -> regions adding hosts of it right now.
    `now`: the time, in the clock of RunningAttempt.started_at (None: eviction cannot
    weigh the work since each victim's last checkpoint, and prefers the youngest).
    `hosts` may be a Fleet kept between passes (scheduler_view.FleetView): not changed."""
    return _Pass(hosts, config or SchedulerConfig(), reserving_gangs, scaling_up or {},
                 now).run(pending)


class _Class:
    __slots__ = ("pool", "need", "constraints", "candidates", "cursor", "busy", "reason",
                 "no_preempt", "unmatched")

    def __init__(self, pool: Pool, need: Demand, constraints: tuple[Constraint, ...]):
        self.pool, self.need, self.constraints = pool, need, constraints
        self.candidates: list[int] = []
        self.cursor = 0
        self.busy = 0  # hosts with room skipped only for back-pressure
        self.reason: PendingReason | None = None
        self.no_preempt = False
        self.unmatched: Constraint | None = None


class _Job:
    __slots__ = ("job_id", "user", "band", "first", "singles", "gangs", "pos", "cls",
                 "cls_key", "alts")

    def __init__(self, t: TaskDemand):
        self.job_id, self.user, self.band, self.first = t.job_id, t.user, t.band, t.submitted_at
        self.singles: list[TaskDemand] = []
        self.gangs: dict[str, list[TaskDemand]] = {}
        self.pos = 0
        self.cls: _Class | None = None
        self.cls_key: tuple[object, object] | None = None
        self.alts: Alternatives | None = None

    def done(self) -> bool:
        return not self.gangs and self.pos >= len(self.singles)


class _Pass:
    def __init__(self, hosts: Sequence[HostView] | Fleet, config: SchedulerConfig,
                 reserving: Collection[str], scaling: Mapping[str, Sequence[str]],
                 now: float | None = None):
        self.config, self.scaling = config, scaling
        self.fleet = hosts.for_pass() if isinstance(hosts, Fleet) else Fleet(hosts)
        hosts = self.fleet.hosts
        self.pre = Preemptor(self.fleet, config.max_preemptions_per_pass, now)
        self.plan = SchedulePlan([], [], [], {})
        self.classes: dict[tuple[object, ...], _Class] = {}
        self.pool_order: dict[Pool, list[int]] = {}
        self.gangs = GangSteps(self, self.fleet, self.pre, reserving,
                               config.max_gang_regions)
        self.used: dict[str, Demand] = {}                # user -> all bands, for quotas
        self.band_used: dict[tuple[Band, str], list[float]] = {}  # for fair share
        for h in hosts:
            for a in h.running:
                self.charge(a.user, a.band, a.demand, 1)

    # ---- accounting: the PassLedger the gang steps reach the pass through -----------

    def charge(self, user: str, band: Band, d: Demand, n: int) -> None:
        u = self.used.get(user, Demand())
        self.used[user] = Demand(u.cpu + d.cpu * n, u.memory + d.memory * n,
                                 u.chips + d.chips * n)
        b = self.band_used.setdefault((band, user), [0.0, 0.0, 0.0])
        b[0] += d.cpu * n
        b[1] += d.memory * n
        b[2] += d.chips * n

    def _share(self, band: Band, user: str) -> float:
        b = self.band_used.get((band, user))
        if b is None:
            return 0.0
        t = self.fleet.total
        return max(b[0] / t.cpu if t.cpu else 0.0, b[1] / t.memory if t.memory else 0.0,
                   b[2] / t.chips if t.chips else 0.0)

    def over_quota(self, user: str, d: Demand, n: int) -> PendingReason | None:
        quota = self.config.quotas.get(user)
        if quota is None:
            return None
        u = self.used.get(user, Demand())
        after = Demand(u.cpu + d.cpu * n, u.memory + d.memory * n, u.chips + d.chips * n)
        if quota.admits(after):
            return None
        return PendingReason(ReasonCode.OVER_QUOTA,
                             f"user {user} would exceed their quota "
                             f"(cpu {quota.cpu}, memory {quota.memory}, chips {quota.chips})",
                             {"user": user, "using": {"cpu": u.cpu, "memory": u.memory,
                                                      "chips": u.chips}})

    # ---- the pass -----------------------------------------------------------------

    def run(self, pending: Sequence[TaskDemand]) -> SchedulePlan:
        bands: dict[Band, dict[str, list[_Job]]] = {}
        jobs: dict[str, _Job] = {}
        demoted = self.config.demoted
        for t in pending:
            job = jobs.get(t.job_id)
            if job is None:
                job = jobs[t.job_id] = _Job(t)
                if demoted and t.user in demoted:
                    job.band = Band.BATCH
                bands.setdefault(job.band, {}).setdefault(t.user, []).append(job)
            if t.gang_id is not None and t.gang_size > 1:
                job.gangs.setdefault(t.gang_id, []).append(t)
            else:
                job.singles.append(t)
        for band in sorted(bands):
            self._run_band(band, bands[band])
        self.plan.preemptions = self.pre.records
        self.plan.gang_requests = self.gangs.requests
        if demoted:
            demoted_reason(self.plan.reasons, pending, demoted)
        return self.plan

    def _run_band(self, band: Band, users: dict[str, list[_Job]]) -> None:
        queues = {u: deque(sorted(js, key=lambda j: (j.first, j.job_id)))
                  for u, js in users.items()}
        heap = [(self._share(band, u), u) for u in sorted(queues)]
        heapq.heapify(heap)
        while heap:
            _, user = heapq.heappop(heap)
            q = queues[user]
            job = q[0]
            self._step(job)
            if job.done():
                q.popleft()
            if q:
                heapq.heappush(heap, (self._share(band, user), user))

    def _step(self, job: _Job) -> None:
        if job.gangs:
            gang_id = next(iter(job.gangs))
            self.gangs.place(job.job_id, job.user, job.band, gang_id, job.gangs.pop(gang_id))
        else:
            self._place_single(job)

    def mark(self, tasks: Sequence[TaskDemand], reason: PendingReason) -> None:
        reasons = self.plan.reasons
        for t in tasks:
            reasons[t.task_id] = reason

    # ---- single tasks ---------------------------------------------------------------

    def _class_of(self, job: _Job, t: TaskDemand) -> _Class:
        if job.cls is not None and job.cls_key == (id(t.resources), id(t.constraints)):
            return job.cls
        need = per_host_demand(t.resources)
        pool = task_pool(t.resources)
        key = (pool, need, t.constraints)
        cls = self.classes.get(key)
        if cls is None:
            cls = self.classes[key] = _Class(pool, need, t.constraints)
            ordered = self._pool_order(pool)
            matching, cls.unmatched = self.fleet.matching(t.constraints, within=set(ordered))
            cls.candidates = [i for i in ordered if i in matching]
        job.cls, job.cls_key = cls, (id(t.resources), id(t.constraints))
        return cls

    def _pool_order(self, pool: Pool) -> list[int]:
        """Busier hosts first (best fit), and for TPUs hosts of already-used slices first,
        so whole slices stay free for gangs."""
        order = self.pool_order.get(pool)
        if order is None:
            f = self.fleet
            busy_slices = {f.hosts[i].slice_id for i in f.pools.get(pool, ())
                           if not f.idle[i] and f.hosts[i].slice_id is not None}
            order = sorted(f.pools.get(pool, ()), key=lambda i: (
                f.hosts[i].slice_id not in busy_slices, _slice_size(f, i), f.free_chips[i],
                f.free_cpu[i], i))
            self.pool_order[pool] = order
        return order

    def _place_single(self, job: _Job) -> None:
        t = job.singles[job.pos]
        if len(t.resources.tpu_alternatives) > 1:  # has_fallbacks, without a call per task
            self._place_fallback(job, t)
            return
        cls = self._class_of(job, t)
        if cls.reason is None:
            quota = self.over_quota(job.user, cls.need, 1)
            if quota is not None:
                self.mark(job.singles[job.pos:], quota)
                job.pos = len(job.singles)
                return
            h = self._find(cls)
            if h is not None:
                self.fleet.take(h, cls.need)
                self.plan.assignments.append(Assignment(t.task_id, t.job_id,
                                                        self.fleet.hosts[h].host_id))
                self.charge(job.user, job.band, cls.need, 1)
                job.pos += 1
                return
            if self._try_preempt(job, t, cls):
                job.pos += 1
                return
            cls.reason = self._no_room(cls)
        # Every following task of the same class fails the same way: mark them in bulk.
        end = job.pos
        while end < len(job.singles) and self._class_of(job, job.singles[end]) is cls:
            end += 1
        self.mark(job.singles[job.pos:end], cls.reason)
        job.pos = end

    def _place_fallback(self, job: _Job, t: TaskDemand) -> None:
        """The first alternative with room now; else evict for the first that can; else
        a reason naming each alternative and why it does not fit."""
        alts = job.alts
        if alts is None or alts.key != (id(t.resources), id(t.constraints)):
            alts = job.alts = Alternatives(t.resources, t.constraints)
            alts.classes = [self._class_of(job, TaskDemand(
                t.task_id, t.job_id, t.user, t.band, r, t.constraints)) for r in alts.options]
            job.cls = None  # the per-alternative lookups above must not stick to the job
        if alts.reason is None:
            for name, cls in zip(alts.names, alts.classes, strict=True):
                if cls.reason is None and self._place_on(job, t, cls, name):
                    return
            for cls in alts.classes:
                if cls.reason is None and self._try_preempt(job, t, cls):
                    job.pos += 1
                    return
            for cls in alts.classes:
                cls.reason = cls.reason or self._no_room(cls)
            alts.reason = combined_reason(alts.names, [c.reason for c in alts.classes])
        end = job.pos
        while end < len(job.singles) and job.singles[end].resources is t.resources \
                and job.singles[end].constraints is t.constraints:
            end += 1
        self.mark(job.singles[job.pos:end], alts.reason)
        job.pos = end

    def _place_on(self, job: _Job, t: TaskDemand, cls: _Class, accelerator: str) -> bool:
        if self.over_quota(job.user, cls.need, 1) is not None:
            return False
        h = self._find(cls)
        if h is None:
            return False
        self.fleet.take(h, cls.need)
        self.plan.assignments.append(Assignment(t.task_id, t.job_id,
                                                self.fleet.hosts[h].host_id, accelerator))
        self.charge(job.user, job.band, cls.need, 1)
        job.pos += 1
        return True

    def _find(self, cls: _Class) -> int | None:
        f = self.fleet
        fc, fm, fch, slots, blocked = f.free_cpu, f.free_mem, f.free_chips, f.slots, f.blocked
        cpu, mem, chips = cls.need.cpu, cls.need.memory, cls.need.chips
        cands, i, n = cls.candidates, cls.cursor, len(cls.candidates)
        while i < n:
            h = cands[i]
            if fc[h] >= cpu and fm[h] >= mem and fch[h] >= chips and not blocked[h]:
                if slots[h] > 0:
                    cls.cursor = i
                    return h
                cls.busy += 1
            i += 1
        cls.cursor = n
        return None

    def _try_preempt(self, job: _Job, t: TaskDemand, cls: _Class) -> bool:
        if cls.no_preempt or self.pre.budget <= 0:
            return False
        found = self.pre.best_host(cls.candidates, cls.need, job.band)
        if found is None:
            cls.no_preempt = True
            return False
        host, victims = found
        host_id = self.fleet.hosts[host].host_id
        self.pre.evict(victims, job.job_id, f"task {t.task_id} of band {job.band.name} "
                                            f"needs room on {host_id}")
        self.fleet.block(host)
        self.plan.reasons[t.task_id] = PendingReason(
            ReasonCode.PREEMPTING,
            f"evicting {len(victims)} lower-band attempt(s) on {host_id}" if victims
            else f"waiting for evicted work to exit on {host_id}",
            {"host": host_id, "evicted": [a.attempt_id for _, a in victims]})
        return True

    def _no_room(self, cls: _Class) -> PendingReason:
        kind, name = cls.pool
        accel = name or "cpu"
        if not self.fleet.pools.get(cls.pool):
            return self.scaling_reason(accel) or PendingReason(
                ReasonCode.NO_CAPACITY, f"no {accel} worker in any region",
                {"accelerator": accel})
        if not cls.candidates:
            what = cls.unmatched.describe() if cls.unmatched else "the constraints"
            return PendingReason(ReasonCode.CONSTRAINT_UNMATCHED,
                                 f"constraint {what} matches no {accel} worker",
                                 {"constraint": what, "accelerator": accel})
        if cls.busy:
            return PendingReason(ReasonCode.WORKERS_BUSY,
                                 f"{cls.busy} worker(s) with room are not accepting new work "
                                 "yet (back-pressure)", {"workers": cls.busy})
        n = cls.need
        # "Full" only for workers that could hold it once free; the others are too small.
        big = sum(1 for h in cls.candidates if _holds(self.fleet.hosts[h].capacity, n))
        why = "; ".join(part for part in (
            f"{big} large enough but busy" if big else "",
            f"{len(cls.candidates) - big} too small for it" if big < len(cls.candidates)
            else "") if part)
        return self.scaling_reason(accel) or PendingReason(
            ReasonCode.NO_CAPACITY,
            f"no {accel} worker has room for cpu={n.cpu:g} memory={human_bytes(n.memory)} "
            f"chips={n.chips} (of {len(cls.candidates)} matching workers: {why})",
            {"cpu": n.cpu, "memory": n.memory, "chips": n.chips, "accelerator": accel,
             "matching_workers": len(cls.candidates), "large_enough": big})

    def scaling_reason(self, accel: str) -> PendingReason | None:
        regions = self.scaling.get(accel)
        if not regions:
            return None
        return PendingReason(ReasonCode.SCALING_UP,
                             f"no {accel} capacity now; scaling up in {', '.join(regions)}",
                             {"accelerator": accel, "regions": list(regions)})


def _slice_size(f: Fleet, i: int) -> int:
    """Hosts in host i's slice (1 outside any slice)."""
    slice_id = f.hosts[i].slice_id
    return len(f.slices.get(slice_id, ())) if slice_id is not None else 1


def _holds(capacity: Demand, need: Demand) -> bool:
    """Could a host of this total capacity hold `need` when nothing else runs there?"""
    return (capacity.cpu >= need.cpu and capacity.memory >= need.memory
            and capacity.chips >= need.chips)
