"""The scheduler's mutable working copy of the fleet for ONE pass; no policy.

Free capacity lives in flat lists indexed by host number (a pass over 10,000 hosts and
100,000 tasks touches them millions of times; attribute lookups on objects were 3x
slower). An attribute index answers "which hosts satisfy these constraints" with set
operations instead of testing every host against every constraint.
"""

from __future__ import annotations

from collections.abc import Sequence

from iris.controller.scheduling.constraints import Constraint, Op
from iris.controller.scheduling.model import Demand, HostView, RunningAttempt

Pool = tuple[str, str | None]  # ("cpu", None) | ("gpu", "H100") | ("tpu", "v5litepod")


def host_pool(host: HostView) -> Pool:
    if host.accelerator_variant:
        return ("tpu", host.accelerator_variant)
    if host.accelerator:
        return ("gpu", host.accelerator)
    return ("cpu", None)


class Fleet:
    """Hosts with what is left free on them as a pass assigns work."""

    def __init__(self, hosts: Sequence[HostView]):
        self.hosts = hosts
        n = len(hosts)
        self.free_cpu = [0.0] * n
        self.free_mem = [0] * n
        self.free_chips = [0] * n
        self.slots = [0] * n
        self.blocked = [False] * n  # held by a gang reservation, or promised this pass
        self.idle = [True] * n      # nothing running and nothing assigned this pass
        self.assigned = [0] * n     # attempts assigned this pass
        self.pools: dict[Pool, list[int]] = {}
        self.slices: dict[str, list[int]] = {}
        self.slices_by_type: dict[str, list[str]] = {}
        self.gang_members: dict[str, list[tuple[int, RunningAttempt]]] = {}
        self._index: dict[str, dict[str, set[int]]] = {}
        self.total = Demand()
        tc = tm = tch = 0.0
        for i, h in enumerate(hosts):
            self._load(i, h)
            tc += h.capacity.cpu
            tm += h.capacity.memory
            tch += h.capacity.chips
        self.total = Demand(tc, int(tm), int(tch))
        self._all = frozenset(range(n))

    def _load(self, i: int, h: HostView) -> None:
        cpu, mem, chips = h.capacity.cpu, h.capacity.memory, h.capacity.chips
        for a in h.running:
            cpu -= a.demand.cpu
            mem -= a.demand.memory
            chips -= a.demand.chips
            if a.gang_id:
                self.gang_members.setdefault(a.gang_id, []).append((i, a))
        self.free_cpu[i], self.free_mem[i], self.free_chips[i] = cpu, mem, chips
        self.slots[i] = h.launch_slots
        self.blocked[i] = h.held
        self.idle[i] = not h.running
        self.pools.setdefault(host_pool(h), []).append(i)
        if h.slice_id is not None:
            members = self.slices.setdefault(h.slice_id, [])
            if not members and h.accelerator:
                self.slices_by_type.setdefault(h.accelerator, []).append(h.slice_id)
            members.append(i)
        for key, value in h.all_attributes().items():
            self._index.setdefault(key, {}).setdefault(value, set()).add(i)

    def matching(self, constraints: Sequence[Constraint],
                 within: frozenset[int] | set[int] | None = None
                 ) -> tuple[set[int] | frozenset[int], Constraint | None]:
        """Hosts satisfying every constraint, and the first constraint that left none."""
        result: set[int] | frozenset[int] = self._all if within is None else within
        for c in constraints:
            result = result & self._hosts_for(c)
            if not result:
                return result, c
        return result, None

    def _hosts_for(self, c: Constraint) -> set[int] | frozenset[int]:
        by_value = self._index.get(c.key, {})
        if c.op is Op.EXISTS:
            present = set().union(*by_value.values()) if by_value else set()
            return present if c.exists else self._all - present
        hits = set().union(*(by_value.get(v, ()) for v in c.values))
        return self._all - hits if c.op is Op.NE else hits

    def fits(self, i: int, need: Demand) -> bool:
        return (self.free_cpu[i] >= need.cpu and self.free_mem[i] >= need.memory
                and self.free_chips[i] >= need.chips)

    def take(self, i: int, need: Demand) -> None:
        self.free_cpu[i] -= need.cpu
        self.free_mem[i] -= need.memory
        self.free_chips[i] -= need.chips
        self.slots[i] -= 1
        self.idle[i] = False
        self.assigned[i] += 1

    def usable_whole(self, i: int) -> bool:
        """A host a gang can take entirely right now."""
        return self.idle[i] and not self.blocked[i] and self.slots[i] > 0
