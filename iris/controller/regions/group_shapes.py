"""Scale groups as the scheduler sees them: the names their hosts go by, which groups offer
the same hosts, and how many slices of one a batch of unplaced work needs. Pure.

Not the autoscaler's decisions (autoscaler.py) nor the routing of demand to regions
(demand.py); both speak in these terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from iris.base.resources import tpu_shape
from iris.controller.config import ScaleGroupConfig


@dataclass(frozen=True)
class Ask:
    """Pending work that found no capacity: either a gang or N single-host tasks."""

    hosts: int  # hosts the work needs (gang size, or number of single tasks)
    whole_slices: int = 0  # >0: TPU gang needing that many whole slices
    chips: int = 0  # accelerators per task (singles pack several per host when chips allow)
    cpu: float = 0.0


def unmet_slices(group: ScaleGroupConfig, asks: Sequence[Ask], *,
                 host_cpu: float | None = None) -> int:
    """Slices of `group` the asks need. `host_cpu`: cores per host, to pack cpu tasks (None:
    unknown, one task per host). An ask no host of the group could run adds nothing."""
    slices, hosts = 0, 0
    for ask in asks:
        if ask.whole_slices:
            slices += ask.whole_slices
            continue
        if ask.chips > group.accelerators_per_host or (
                host_cpu is not None and ask.cpu > host_cpu):
            continue
        per_host = group.accelerators_per_host // ask.chips if ask.chips else math.inf
        if host_cpu is not None and ask.cpu > 0:
            per_host = min(per_host, host_cpu // ask.cpu)
        per_host = 1 if math.isinf(per_host) else max(1, int(per_host))
        hosts += math.ceil(ask.hosts / per_host)
    return slices + math.ceil(hosts / group.hosts_per_slice)


def accelerator_keys(group: ScaleGroupConfig) -> tuple[str, ...]:
    """Names the scheduler uses for this group's hosts: the variant ("v5litepod-16", "H100"),
    for TPUs also the family single-host tasks are pooled by ("v5litepod"); else "cpu"."""
    if group.accelerator_type == "cpu" or not group.accelerator_variant:
        return ("cpu",)
    if group.accelerator_type == "tpu":
        return (group.accelerator_variant, tpu_shape(group.accelerator_variant).family)
    return (group.accelerator_variant,)


def pool_key(g: ScaleGroupConfig) -> tuple:
    """Groups with equal keys offer the same hosts, so they serve the same demand."""
    return (g.accelerator_type, g.accelerator_variant, g.hosts_per_slice,
            g.accelerators_per_host)
