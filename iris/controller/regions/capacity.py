"""What the cluster could ever offer one task, checked at submit time. Pure.

Not what is free now (the scheduler's host views): a request that no scale group could
satisfy even when idle, and no registered worker either (an accelerator nobody offers, more
CPU than any host has), is refused at submit with an error naming the field, instead of
pending forever. The catalogue is the config's scale groups plus the workers registered
now: a hand-started worker counts as much as a group (worker_desk.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from iris.base.resources import Resources, human_bytes


@dataclass(frozen=True)
class Offer:
    """One host shape a scale group provides. None means "not known" (not checked)."""

    group: str
    accelerator: str | None = None  # "v5litepod-16", "H100"; None for cpu hosts
    accelerators_per_host: int = 0
    cpu: float | None = None
    memory_bytes: int | None = None


def offers_from_groups(groups: Iterable) -> tuple[Offer, ...]:
    """Offers of the cluster config's scale groups (config.ScaleGroupConfig)."""
    return tuple(Offer(g.name, g.accelerator_variant if g.accelerator_type != "cpu" else None,
                       g.accelerators_per_host) for g in groups)


def fits_checker(offers: tuple[Offer, ...]) -> Callable[[Resources], str | None]:
    """fits(resources) -> None if some offer can run it, else why not (for validate_submit)."""

    def fits(res: Resources) -> str | None:
        wanted = res.accelerator
        same_kind = [o for o in offers if o.accelerator == wanted]
        if not same_kind:
            offered = sorted({o.accelerator or "cpu" for o in offers})
            return (f"no scale group offers {wanted or 'cpu-only hosts'}, nor does any "
                    f"registered worker (offered: {', '.join(offered) or 'nothing'})")
        if res.gpu and all(o.accelerators_per_host < res.count for o in same_kind):
            return f"{res.count} x {res.gpu} per task is more than any host has"
        cpus = [o.cpu for o in same_kind]
        if None not in cpus and res.cpu > max(cpus):
            return f"cpu={res.cpu:g}: the largest host offers {max(cpus):g}"
        memories = [o.memory_bytes for o in same_kind]
        if None not in memories and res.memory_bytes > max(memories):
            return (f"memory={human_bytes(res.memory_bytes)}: the largest host offers "
                    f"{human_bytes(max(memories))}")
        return None

    return fits


def offers_from_workers(workers: Iterable) -> tuple[Offer, ...]:
    """Offers of the registered workers (controller.workers.WorkerInfo), one per shape: a
    cluster without a config is bounded by the hosts it has."""
    shapes = {(w.attributes.get("accelerator_type") or None, w.accelerators, w.cpu,
               w.memory_bytes or None) for w in workers}
    return tuple(Offer("registered workers", *shape) for shape in sorted(
        shapes, key=lambda s: (s[0] or "", s[1], s[2], s[3] or 0)))


