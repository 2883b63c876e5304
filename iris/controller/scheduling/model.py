"""What the scheduling kernels see: bands, per-host demand vectors, hosts, pending tasks, gang shapes.

Pure frozen data, built by the controller from its job table and its regions' reports; no
behaviour beyond small derived properties. Not the controller's persistent job model.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from iris.base.errors import InvalidRequestError
from iris.base.resources import Resources
from iris.controller.scheduling.constraints import Constraint, normalize_value


class Band(enum.IntEnum):
    """Priority bands; a smaller value is more important and may preempt larger values."""

    PRODUCTION = 0
    INTERACTIVE = 1
    BATCH = 2

    @classmethod
    def parse(cls, name: str | Band) -> Band:
        if isinstance(name, Band):
            return name
        try:
            return cls[str(name).upper()]
        except KeyError:
            raise InvalidRequestError(
                f"priority: unknown band {name!r} (use production, interactive or batch)",
                "priority") from None


@dataclass(frozen=True, slots=True)
class Demand:
    """Resources on ONE host: cpu cores, memory bytes, accelerator units (TPU chips or GPUs)."""

    cpu: float = 0.0
    memory: int = 0
    chips: int = 0

    def __add__(self, other: Demand) -> Demand:
        return Demand(self.cpu + other.cpu, self.memory + other.memory, self.chips + other.chips)


def per_host_demand(resources: Resources) -> Demand:
    """What one task of `resources` takes on its host (a TPU task takes its host's chips)."""
    shape = resources.tpu_slice
    if shape is not None:
        chips = shape.chips_per_host if shape.hosts > 1 else shape.chips
    elif resources.gpu:
        chips = resources.count
    else:
        chips = 0
    return Demand(float(resources.cpu), resources.memory_bytes, chips)


@dataclass(frozen=True, slots=True)
class RunningAttempt:
    """An attempt occupying part of a host. `terminating`: already told to stop (grace period).
    `started_at`: when it started running (seconds, in the clock of the pass's `now`;
    None = unknown) and `checkpoint_every`: how often its job checkpoints (seconds; None =
    unknown): an evicted attempt loses its work since its last checkpoint, so eviction
    picks, among equally cheap choices, the one with the least of it (preemption.py)."""

    attempt_id: str
    task_id: str
    job_id: str
    user: str
    band: Band
    demand: Demand
    gang_id: str | None = None
    terminating: bool = False
    started_at: float | None = None
    checkpoint_every: float | None = None


@dataclass(frozen=True)
class HostView:
    """One worker host as the scheduler sees it at the start of a pass.

    `accelerator` is the host's accelerator type: the TPU slice type ("v5litepod-16") or
    the GPU model ("H100"); None for a CPU-only host. `accelerator_variant` is the TPU
    family ("v5litepod") so single-host TPU tasks can pack onto hosts of larger slices.
    `launch_slots` is how many new attempts the worker accepts this pass (back-pressure:
    a worker still unpacking environments reports fewer). `held` marks a host under a gang
    reservation, which nothing else may take.
    """

    host_id: str
    region: str
    zone: str
    capacity: Demand
    scale_group: str = ""
    slice_id: str | None = None
    accelerator: str | None = None
    accelerator_variant: str | None = None
    preemptible: bool = False
    running: tuple[RunningAttempt, ...] = ()
    attributes: Mapping[str, object] = field(default_factory=dict)
    launch_slots: int = 1_000_000
    held: bool = False

    def all_attributes(self) -> dict[str, str]:
        """Every attribute a constraint may name, normalized (worker attributes override none
        of the built-in keys)."""
        merged = {k: normalize_value(v) for k, v in self.attributes.items()}
        merged.update(region=self.region, zone=self.zone,
                      preemptible=normalize_value(self.preemptible))
        if self.scale_group:
            merged["scale_group"] = self.scale_group
        if self.accelerator:
            merged["accelerator"] = self.accelerator
        if self.accelerator_variant:
            merged["accelerator_variant"] = self.accelerator_variant
        return merged


@dataclass(frozen=True)
class TaskDemand:
    """One pending task. Tasks of a gang share `gang_id` and are placed together or not at all."""

    task_id: str
    job_id: str
    user: str
    band: Band
    resources: Resources
    constraints: tuple[Constraint, ...] = ()
    gang_id: str | None = None
    gang_size: int = 1
    submitted_at: float = 0.0


@dataclass(frozen=True)
class GangShape:
    """What a gang reservation must hold in one region: whole hosts, all alike.

    `whole_slices` > 0: that many complete slices of type `accelerator` (TPU gangs).
    `whole_slices` == 0: any `hosts` hosts of `accelerator` (None = CPU hosts).
    `one_pool`: every host in one pool (`pool_of`), as a GPU gang's NCCL traffic needs
    hosts on one fabric, not merely one region.
    """

    accelerator: str | None
    hosts: int
    whole_slices: int = 0
    constraints: tuple[Constraint, ...] = ()
    one_pool: bool = False

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.whole_slices < 0:
            raise InvalidRequestError(f"gang shape: hosts must be >= 1 and whole_slices >= 0, "
                                      f"got {self.hosts}, {self.whole_slices}", "gang")


def gang_shape(resources: Resources, gang_size: int,
               constraints: tuple[Constraint, ...] = ()) -> GangShape:
    """The reservation a gang of `gang_size` tasks with `resources` each needs."""
    shape = resources.tpu_slice
    if shape is not None and shape.hosts > 1:
        return GangShape(shape.name, gang_size, resources.count, constraints)
    return GangShape(resources.accelerator, gang_size, 0, constraints,
                     one_pool=bool(resources.gpu) and gang_size > 1)


def pool_of(attributes: Mapping[str, object]) -> str:
    """The pool a host belongs to for a GPU gang: its `pool` attribute (`iris worker --attr
    pool=a3-east`), else its zone (hosts of one zone share a network; across zones they
    do not)."""
    pool = attributes.get("pool")
    if pool is not None:
        return f"pool={normalize_value(pool)}"
    return f"zone={normalize_value(attributes.get('zone', ''))}"


@dataclass(frozen=True)
class Quota:
    """A user's ceiling on what they run at once, all bands together; None = unlimited."""

    cpu: float | None = None
    memory: int | None = None
    chips: int | None = None

    def admits(self, used: Demand) -> bool:
        return ((self.cpu is None or used.cpu <= self.cpu)
                and (self.memory is None or used.memory <= self.memory)
                and (self.chips is None or used.chips <= self.chips))
