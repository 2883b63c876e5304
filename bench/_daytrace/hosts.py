"""The simulated hosts of one cluster: what runs where, as the scheduler's HostViews.

Not decisions. Hosts appear when the SimulatedProvider reports their slice READY and go
when it is PREEMPTED or deleted. `start` refuses to double-book a host and records the
attempt, so the invariants the day-trace test checks hold or are written down.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench._daytrace.work import Task
from iris.controller.config import ScaleGroupConfig
from iris.controller.gangs.ledger import SliceSpec
from iris.controller.scheduling.model import Demand, HostView, RunningAttempt

TPU_HOST = Demand(96.0, 400 * 10**9, 4)  # v5litepod host: 4 chips, 96 vCPU
CPU_HOST = Demand(32.0, 128 * 10**9, 0)


@dataclass
class Host:
    host_id: str
    region: str
    zone: str
    slice_id: str
    group: ScaleGroupConfig
    capacity: Demand
    tasks: dict[str, Task] = field(default_factory=dict)  # attempt id -> task
    view: HostView | None = None

    @property
    def accelerator(self) -> str | None:
        return self.group.accelerator_variant

    def free(self) -> Demand:
        cpu, mem, chips = self.capacity.cpu, self.capacity.memory, self.capacity.chips
        for t in self.tasks.values():
            cpu -= t.job.need.cpu
            mem -= t.job.need.memory
            chips -= t.job.need.chips
        return Demand(cpu, mem, chips)

    def as_view(self) -> HostView:
        if self.view is None:
            acc = self.accelerator
            self.view = HostView(
                self.host_id, self.region, self.zone, self.capacity,
                scale_group=self.group.name, slice_id=self.slice_id, accelerator=acc,
                accelerator_variant=acc.rsplit("-", 1)[0] if acc else None,
                preemptible=self.group.preemptible,
                running=tuple(RunningAttempt(a, t.demand.task_id, t.job.job.id, t.job.job.user,
                                             t.job.band, t.job.need, t.demand.gang_id,
                                             started_at=t.started_at,
                                             checkpoint_every=t.job.job.checkpoint_s)
                              for a, t in self.tasks.items()))
        return self.view


class Hosts:
    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}
        self.slices: dict[str, list[str]] = {}
        self.specs: dict[str, SliceSpec] = {}
        self.violations: list[str] = []  # double-booked hosts, half-placed gangs

    def add_slice(self, slice_id: str, group: ScaleGroupConfig, zone: str,
                  host_ids: tuple[str, ...]) -> None:
        cap = TPU_HOST if group.accelerator_type == "tpu" else CPU_HOST
        self.slices[slice_id] = list(host_ids)
        for h in host_ids:
            self.hosts[h] = Host(h, group.region, zone, slice_id, group, cap)
        self.specs[slice_id] = SliceSpec(slice_id, group.accelerator_variant, host_ids,
                                         {"zone": zone})

    def drop_slice(self, slice_id: str) -> list[Task]:
        """The slice is gone: its hosts vanish; the tasks that ran there, to be stopped."""
        lost = []
        for h in self.slices.pop(slice_id, ()):
            lost += self.hosts.pop(h).tasks.values()
        self.specs.pop(slice_id, None)
        return lost

    def start(self, task: Task, host_id: str, attempt: str) -> bool:
        h = self.hosts.get(host_id)
        if h is None:
            self.violations.append(f"{task.demand.task_id} assigned to missing host {host_id}")
            return False
        free = h.free()
        n = task.job.need
        if free.cpu < n.cpu or free.memory < n.memory or free.chips < n.chips:
            self.violations.append(f"host {host_id} double-booked by {task.demand.task_id}")
            return False
        h.tasks[attempt] = task
        h.view = None
        return True

    def release(self, task: Task) -> None:
        h = self.hosts.get(task.host or "")
        if h is not None and task.attempt in h.tasks:
            del h.tasks[task.attempt]
            h.view = None

    def views(self) -> list[HostView]:
        return [h.as_view() for h in self.hosts.values()]

    def region_inventory(self, region: str) -> tuple[list[SliceSpec], list[str]]:
        """The ledger's inventory: the region's slices, and its hosts running anything."""
        specs, busy = [], []
        for sid, spec in self.specs.items():
            hosts = [self.hosts[h] for h in self.slices[sid]]
            if hosts[0].region != region:
                continue
            specs.append(spec)
            busy += [h.host_id for h in hosts if h.tasks]
        return specs, busy
