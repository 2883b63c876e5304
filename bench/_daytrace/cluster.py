"""One scheduling domain driven through the REAL kernels on a fake clock: no sockets, no sleeps.

A Cluster is what the controller would be over its regions: each `step(now)` does, in the
controller's order, what its actors do on their turns, calling the same pure kernels:

1. observe the SimulatedProvider: READY slices bring hosts, PREEMPTED / deleted ones take
   them and stop what ran there (the checkpoint rule in work.py books the loss);
   (attempts whose work ended before are finished first);
2. fire the gangs object's due timers;
3. one `scheduling.schedule` pass over every pending task; apply its evictions and
   assignments; hand each GangRequest to the gangs object (`GangTracker`), whose requests go
   straight to each region's `ReservationLedger` (inventory pushed first, as the controller does);
4. turn what found no room into autoscaler demand (`demand.route`) and run each region's
   `Autoscaler.decide`, applying its creates and deletes to the provider.

Global scheduling is one Cluster over every region; the per-region baseline is one Cluster
per region, each seeing only its region and the jobs pinned to it.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import time

from bench._daytrace.hosts import Hosts
from bench._daytrace.work import JobRun, Ledger, Task
from iris.base.errors import CapacityError
from iris.controller.config import ScaleGroupConfig
from iris.controller.gangs.ledger import ReservationLedger
from iris.controller.gangs.tracking import CoordinatorConfig, GangRound, GangTracker, Phase
from iris.controller.providers.base import SliceState
from iris.controller.providers.simulated import SimulatedProvider
from iris.controller.regions import demand
from iris.controller.regions.autoscaler import Autoscaler, AutoscalerConfig, Create, SliceUsage
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import SchedulerConfig, schedule

_UNPLACED = (ReasonCode.NO_CAPACITY, ReasonCode.SCALING_UP)


class Cluster:
    def __init__(self, name: str, groups: dict[str, list[ScaleGroupConfig]],
                 provider: SimulatedProvider, work: Ledger,
                 autoscaler_config: AutoscalerConfig,
                 scheduler_config: SchedulerConfig | None = None):
        self.name = name
        self.groups = groups
        self.group_by_name = {g.name: g for gs in groups.values() for g in gs}
        self.provider = provider
        self.work = work
        self.sched_config = scheduler_config or SchedulerConfig()
        self.hosts = Hosts()
        self.coord = GangTracker()
        self.round_of: dict[str, str] = {}  # gang id -> its round's key
        self.ledgers = {r: ReservationLedger(r, []) for r in groups}
        self.autoscalers = {r: Autoscaler(r, gs, autoscaler_config, id_prefix=r)
                            for r, gs in groups.items()}
        self.pending: dict[str, Task] = {}
        self.running: dict[str, Task] = {}  # attempt id -> task
        self.gangs: dict[str, list[Task]] = {}
        self.reserving: set[str] = set()
        self.cooling: dict[str, float] = {}
        self.ends: list[tuple[float, int, str]] = []
        self.pass_times: list[tuple[int, int, float]] = []  # (hosts, pending, seconds)
        self._seq = itertools.count()
        # A pass over an unchanged cluster decides nothing new: skipped (3x faster day).
        self._dirty = True
        self._unplaced: dict[str, int] = {}
        self._last_pass = -1.0
        self.dropped: set[str] = set()  # slices a capacity drop took (world.py says which)

    # ---- inputs ---------------------------------------------------------------------

    def submit(self, run: JobRun) -> None:
        self._dirty = True
        for t in run.tasks:
            self.pending[t.demand.task_id] = t
            if t.demand.gang_id:
                self.gangs.setdefault(t.demand.gang_id, []).append(t)

    def step(self, now: float) -> None:
        self._finish(now)  # first: work that ended before a slice was lost is not lost
        self._observe(now)
        self.coord.fire_due(now)
        self._pump(now)
        unplaced = self._schedule(now)
        self._autoscale(now, unplaced)

    # ---- the provider's view ----------------------------------------------------------

    def _observe(self, now: float) -> None:
        listed = set()
        for info in self.provider.list_slices():
            group = self.group_by_name.get(info.group)
            if group is None:
                continue
            listed.add(info.slice_id)
            known = info.slice_id in self.hosts.slices
            if info.state is SliceState.READY and not known:
                self._dirty = True
                self.hosts.add_slice(info.slice_id, group, info.zone,
                                     tuple(h.host_id for h in info.hosts))
            elif info.state is not SliceState.READY and known:
                self._lose_slice(info.slice_id, now)
        for sid in [s for s in self.hosts.slices if s not in listed]:
            self._lose_slice(sid, now)

    def _lose_slice(self, slice_id: str, now: float) -> None:
        self._dirty = True
        cause = "drop" if slice_id in self.dropped else "reclaimed"
        for task in self.hosts.drop_slice(slice_id):
            self._stop(task, now, evicted=False, cause=cause)

    # ---- attempts ---------------------------------------------------------------------

    def _start(self, task: Task, host_id: str, now: float) -> bool:
        attempt = f"a{next(self._seq)}"
        if not self.hosts.start(task, host_id, attempt):
            return False
        self.pending.pop(task.demand.task_id, None)
        self.work.start(task, host_id, attempt, now)
        self.running[attempt] = task
        heapq.heappush(self.ends, (now + task.remaining_s, next(self._seq), attempt))
        return True

    def _finish(self, now: float) -> None:
        ended_gangs = set()
        while self.ends and self.ends[0][0] <= now:
            end, _, attempt = heapq.heappop(self.ends)
            task = self.running.pop(attempt, None)
            if task is None:
                continue  # stopped before it could finish
            self.hosts.release(task)
            self.work.finish(task, end)
            self._dirty = True
            if task.demand.gang_id:
                ended_gangs.add(task.demand.gang_id)
            if all(t.done for t in task.job.tasks):
                task.job.finished_at = end
        for gid in sorted(ended_gangs):
            if all(t.done for t in self.gangs[gid]):
                self._release(gid, now)

    def _stop(self, task: Task, now: float, evicted: bool, cause: str = "") -> None:
        """Stop an attempt early (host lost, or evicted); a gang stops whole and goes back
        to pending whole, and its reservation is released."""
        if task.attempt is None:
            return
        self._dirty = True
        self.running.pop(task.attempt, None)
        self.hosts.release(task)
        self.work.stop(task, now, evicted, cause)
        self.pending[task.demand.task_id] = task
        gid = task.demand.gang_id
        if gid:
            for other in self.gangs[gid]:
                self._stop(other, now, evicted, cause)
            self._release(gid, now)

    # ---- one scheduling pass -------------------------------------------------------------

    def _schedule(self, now: float) -> dict[str, int]:
        """The pass; returns job id -> tasks no region has room for (autoscaler demand)."""
        if not self._dirty and not any(self._last_pass < until <= now
                                       for until in self.cooling.values()):
            return self._unplaced
        self._dirty = False
        self._last_pass = now
        self._unplaced = unplaced = {}
        demands = []
        for t in self.pending.values():
            gid = t.demand.gang_id
            if gid and self.cooling.get(gid, -1.0) > now:
                unplaced[t.demand.job_id] = unplaced.get(t.demand.job_id, 0) + 1
            else:
                demands.append(t.demand)
        if not demands:
            return unplaced
        views = self.hosts.views()
        scaling: dict[str, list[str]] = {}
        for r, a in self.autoscalers.items():
            for acc in a.scaling_up(now):
                scaling.setdefault(acc, []).append(r)
        started = time.perf_counter()
        plan = schedule(views, demands, config=self.sched_config,
                        reserving_gangs=self.reserving, scaling_up=scaling, now=now)
        self.pass_times.append((len(views), len(demands), time.perf_counter() - started))
        if plan.assignments or plan.preemptions or plan.gang_requests:
            self._dirty = True  # the next pass may use what this one freed or asked for
        for p in plan.preemptions:
            task = self.running.get(p.attempt_id)
            if task is not None:
                self._stop(task, now, evicted=True)
        for a in plan.assignments:
            self._start(self.pending[a.task_id], a.host_id, now)
        if plan.gang_requests:
            self._sync_ledgers(now)
        for req in plan.gang_requests:
            self.reserving.add(req.gang_id)
            tasks = tuple(f"{req.gang_id}[{i}]" for i in range(len(req.task_ids)))
            rnd = self.coord.request(dataclasses.replace(req, task_ids=tasks))
            self.round_of[req.gang_id] = rnd.key
            self._pump(now)
        for task_id, reason in plan.reasons.items():
            if reason.code in _UNPLACED:
                job = task_id.rsplit("/", 1)[0]
                unplaced[job] = unplaced.get(job, 0) + 1
        return unplaced

    # ---- gangs: the coordinator talking to the ledgers, messages handed over in memory ----

    def _sync_ledgers(self, now: float) -> None:
        for region, ledger in self.ledgers.items():
            specs, busy = self.hosts.region_inventory(region)
            ledger.set_inventory(specs, busy)

    def _release(self, gid: str, now: float) -> None:
        key = self.round_of.pop(gid, None)
        if key is not None:
            self.coord.release(key)
            self._pump(now)

    def _pump(self, now: float) -> None:
        """Requests to the ledgers and their replies back until nothing moves."""
        while True:
            sends = self.coord.take_sends(now)
            for send in sends:
                self.coord.replied(send.region, [self.ledgers[send.region].handle(m, now)
                                                 for m in send.requests], now)
            outcomes = self.coord.take_outcomes()
            for rnd in outcomes:
                if rnd.phase is Phase.PLACED:
                    self._dirty = True
                    self._placed(rnd, now)
                elif rnd.phase is Phase.GIVEN_UP:
                    self._dirty = True
                    self.reserving.discard(rnd.gang_id)
                    self.round_of.pop(rnd.gang_id, None)
                    self.cooling[rnd.gang_id] = now + CoordinatorConfig().retry_after_s
            if not sends and not outcomes:
                return

    def _placed(self, rnd: GangRound, now: float) -> None:
        self.reserving.discard(rnd.gang_id)
        tasks = self.gangs[rnd.gang_id]
        ready = [self.hosts.hosts.get(h) for h in rnd.hosts]
        if (any(t.attempt is not None or t.done for t in tasks) or None in ready
                or any(h.tasks for h in ready)):
            self._release(rnd.gang_id, now)  # the region's view lagged: give it back
            return
        self._check_whole(rnd, tasks)
        for task, host in zip(tasks, rnd.hosts, strict=True):
            self._start(task, host, now)

    def _check_whole(self, eff: GangRound, tasks: list[Task]) -> None:
        hosts = [self.hosts.hosts[h] for h in eff.hosts]
        acc = tasks[0].job.resources.tpu
        slices = {h.slice_id for h in hosts}
        whole = all(set(self.hosts.slices[s]) <= set(eff.hosts) for s in slices)
        if (len(hosts) != len(tasks) or len({h.region for h in hosts}) != 1 or not whole
                or any(h.accelerator != acc for h in hosts)):
            self.hosts.violations.append(f"gang {eff.gang_id} not placed whole: {eff.hosts}")

    # ---- autoscaling --------------------------------------------------------------------

    def _autoscale(self, now: float, unplaced: dict[str, int]) -> None:
        jobs = {t.demand.job_id: t.job for t in self.pending.values()}
        asks = [(jobs[j].spec, n) for j, n in sorted(unplaced.items()) if j in jobs]
        blocked = {r: a.blocked(now) for r, a in self.autoscalers.items()}
        wanted = demand.route(asks, self.groups, blocked)
        slices = self.provider.list_slices()
        for region, scaler in self.autoscalers.items():
            mine = [s for s in slices if s.group in self.group_by_name
                    and self.group_by_name[s.group].region == region]
            usage = {}
            for s in mine:
                members = self.hosts.slices.get(s.slice_id, ())
                busy = sum(1 for h in members if self.hosts.hosts[h].tasks)
                usage[s.slice_id] = SliceUsage(len(members), busy)
            for d in scaler.decide(now, mine, usage, wanted.get(region, {})):
                if isinstance(d, Create):
                    self._create(scaler, d, now)
                else:
                    self._lose_slice(d.slice_id, now)
                    self.provider.delete_slice(d.slice_id)

    def _create(self, scaler: Autoscaler, d: Create, now: float) -> None:
        try:
            self.provider.create_slice(self.group_by_name[d.group], d.zone, d.slice_id)
        except CapacityError as exc:
            scaler.create_failed(d.group, d.zone, str(exc), True, now, slice_id=d.slice_id)

    # ---- figures ----------------------------------------------------------------------

    def sample(self) -> dict[str, float]:
        """TPU chips busy and ready, slices busy, and free chips no pending gang can use."""
        for gid, tasks in self.gangs.items():
            running = sum(t.attempt is not None for t in tasks)
            if running not in (0, len(tasks)):
                self.hosts.violations.append(f"gang {gid}: {running} of {len(tasks)} running")
        wanted = {t.job.resources.tpu for t in self.pending.values()
                  if t.demand.gang_id and t.job.resources.tpu}
        busy_chips = ready_chips = busy_slices = frag = 0
        for members in self.hosts.slices.values():
            hosts = [self.hosts.hosts[h] for h in members]
            if hosts[0].capacity.chips == 0:
                continue
            used = sum(t.job.chips for h in hosts for t in h.tasks.values())
            cap = sum(h.capacity.chips for h in hosts)
            busy_chips += used
            ready_chips += cap
            busy_slices += used > 0
            if wanted and not (used == 0 and hosts[0].accelerator in wanted):
                frag += cap - used
        return {"busy_chips": busy_chips, "ready_chips": ready_chips,
                "busy_slices": busy_slices, "fragmented_chips": frag if wanted else 0}

    def horizon(self, now: float) -> None:
        for task in self.running.values():
            self.work.horizon(task, now)
