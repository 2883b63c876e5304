"""The fleet as the scheduler sees it: free capacity per host and an attribute index; no policy.

Free capacity lives in flat lists indexed by host number (a pass over 10,000 hosts and
100,000 tasks touches them millions of times; attribute lookups on objects were 3x
slower). An attribute index answers "which hosts satisfy these constraints" with set
operations instead of testing every host against every constraint.

A Fleet can be kept between passes and changed host by host (`update`, `append`): building
one from scratch costs ~10 us a host (100 ms at 10,000 hosts, once per submit before), while
`for_pass` copies only the lists a pass mutates (C-speed list copies, ~0.1 ms at 10,000) and
shares the index, pools and slices, which no pass changes.
"""

from __future__ import annotations

import bisect
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
        self.hosts = list(hosts)
        n = len(hosts)
        self.free_cpu = [0.0] * n
        self.free_mem = [0] * n
        self.free_chips = [0] * n
        self.slots = [0] * n
        self.blocked = [False] * n  # held by a gang reservation, or promised this pass
        self.idle = [True] * n      # nothing running and nothing assigned this pass
        self.assigned = [0] * n     # attempts assigned this pass
        # Hosts a pass made unusable (`take`, `block`), in order: what changed since a look.
        self.touched: list[int] = []
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
        self._load_running(i, h)
        self.pools.setdefault(host_pool(h), []).append(i)
        if h.slice_id is not None:
            members = self.slices.setdefault(h.slice_id, [])
            if not members and h.accelerator:
                self.slices_by_type.setdefault(h.accelerator, []).append(h.slice_id)
            members.append(i)
        for key, value in h.all_attributes().items():
            self._index.setdefault(key, {}).setdefault(value, set()).add(i)

    def _load_running(self, i: int, h: HostView) -> None:
        """What changes as work comes and goes: free capacity, slots, hold, gang members."""
        cpu, mem, chips = h.capacity.cpu, h.capacity.memory, h.capacity.chips
        for a in h.running:
            cpu -= a.demand.cpu
            mem -= a.demand.memory
            chips -= a.demand.chips
            if a.gang_id:
                members = self.gang_members.setdefault(a.gang_id, [])
                # in host order, as a build from scratch lists them
                at = bisect.bisect_right([j for j, _ in members], i)
                members.insert(at, (i, a))
        self.free_cpu[i], self.free_mem[i], self.free_chips[i] = cpu, mem, chips
        self.slots[i] = h.launch_slots
        self.blocked[i] = h.held
        self.idle[i] = not h.running

    # ---- kept between passes ----------------------------------------------------------

    def for_pass(self) -> Fleet:
        """A working copy for one pass: the lists a pass mutates are copied, the rest shared
        (a pass never changes the index, pools, slices or gang members)."""
        copy = object.__new__(Fleet)
        copy.__dict__.update(self.__dict__)
        for name in ("free_cpu", "free_mem", "free_chips", "slots", "blocked", "idle"):
            setattr(copy, name, list(getattr(self, name)))
        copy.assigned = [0] * len(self.hosts)
        copy.touched = []
        return copy

    def update(self, i: int, h: HostView) -> bool:
        """Host i is now `h`. False (nothing changed) when more than what runs on it or its
        hold changed: the caller then builds the fleet again."""
        if not same_static(self.hosts[i], h):
            return False
        self.set_running(i, h.running, h.held)
        self.hosts[i] = h
        return True

    def set_running(self, i: int, running: tuple[RunningAttempt, ...], held: bool) -> None:
        """Host i is its row but for what runs on it and its hold: `update` without
        building the registration part again, nor comparing it."""
        old = self.hosts[i]
        for a in old.running:
            if a.gang_id:
                members = self.gang_members[a.gang_id]
                members.remove((i, a))
                if not members:
                    del self.gang_members[a.gang_id]
        row = object.__new__(HostView)
        row.__dict__.update(old.__dict__, running=running, held=held)
        self.hosts[i] = row
        self._load_running(i, row)

    def set_held(self, i: int, held: bool) -> None:
        """Host i's hold set or cleared, nothing else about it changed: its row is the
        same but for the flag (a copy of it, ~1 µs, where building the row again was ~15)."""
        row = object.__new__(HostView)
        row.__dict__.update(self.hosts[i].__dict__, held=held)
        self.hosts[i] = row
        self.blocked[i] = held

    def append(self, h: HostView) -> None:
        """A new host, last: the same as a build with it at the end of the list."""
        i = len(self.hosts)
        self.hosts.append(h)
        for arr, value in ((self.free_cpu, 0.0), (self.free_mem, 0), (self.free_chips, 0),
                           (self.slots, 0), (self.blocked, False), (self.idle, True),
                           (self.assigned, 0)):
            arr.append(value)
        self._load(i, h)
        t = self.total
        self.total = Demand(t.cpu + h.capacity.cpu, int(t.memory + h.capacity.memory),
                            int(t.chips + h.capacity.chips))
        self._all = frozenset(range(i + 1))

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
        self.touched.append(i)

    def block(self, i: int) -> None:
        """Nothing more goes to host i this pass (a gang holds it, or evictions free it)."""
        self.blocked[i] = True
        self.touched.append(i)

    def usable_whole(self, i: int) -> bool:
        """A host a gang can take entirely right now."""
        return self.idle[i] and not self.blocked[i] and self.slots[i] > 0


def same_static(a: HostView, b: HostView) -> bool:
    """Equal but for what runs on them and their hold (what `Fleet.update` can change)."""
    return (a.host_id == b.host_id and a.region == b.region and a.zone == b.zone
            and a.capacity == b.capacity and a.scale_group == b.scale_group
            and a.slice_id == b.slice_id and a.accelerator == b.accelerator
            and a.accelerator_variant == b.accelerator_variant
            and a.preemptible == b.preemptible and a.attributes == b.attributes
            and a.launch_slots == b.launch_slots)
