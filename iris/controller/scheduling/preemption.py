"""Choosing what to evict so more important work fits; records the evictions. Not the ordering.

Only strictly lower bands are evicted (production > interactive > batch). A victim that is
part of a gang takes its whole gang with it, because a gang runs whole or not at all, so
its cost counts every member. Attempts already terminating (told to stop, in their grace
period) count as room that is coming, so a pass never evicts twice for the same need.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from iris.controller.scheduling.fleet import Fleet
from iris.controller.scheduling.model import Band, Demand, RunningAttempt

# Scanning every host for the cheapest victim is O(hosts) per preempting task; past this
# many hosts the best found so far is good enough (a 1-victim host is taken at once).
_MAX_SCAN = 2_000

Victim = tuple[int, RunningAttempt]  # (host index in the fleet, attempt on it)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop this attempt (SIGTERM, then its grace period) and requeue its task."""

    attempt_id: str
    task_id: str
    job_id: str
    host_id: str
    band: Band
    gang_id: str | None
    for_job: str  # the job the room is made for
    reason: str


class Preemptor:
    def __init__(self, fleet: Fleet, budget: int, now: float | None = None):
        self.fleet = fleet
        self.now = now  # the pass's time, in the clock of RunningAttempt.started_at
        self.budget = budget  # evictions still allowed this pass
        self.evicted: set[str] = set()
        self.records: list[Preemption] = []

    @contextmanager
    def no_evictions(self) -> Iterator[None]:
        """Within: no eviction is allowed (a gang tries free room on every alternative
        before evicting for any)."""
        budget, self.budget = self.budget, 0
        try:
            yield
        finally:
            self.budget = budget

    def _gone(self, a: RunningAttempt) -> bool:
        return a.terminating or a.attempt_id in self.evicted

    def host_victims(self, i: int, need: Demand, band: Band) -> list[Victim] | None:
        """Attempts to evict on host i so `need` fits ([] = room is coming), or None."""
        f = self.fleet
        if f.blocked[i] or f.slots[i] <= 0:
            return None
        cpu, mem, chips = f.free_cpu[i], f.free_mem[i], f.free_chips[i]
        lower = []
        for a in f.hosts[i].running:
            if self._gone(a):
                cpu, mem, chips = cpu + a.demand.cpu, mem + a.demand.memory, chips + a.demand.chips
            elif a.band > band:
                lower.append(a)
        victims: list[Victim] = []
        lower.sort(key=lambda a: (-a.band, -a.demand.chips, -a.demand.cpu))
        for a in [None, *lower]:
            if a is not None:
                victims.append((i, a))
                cpu, mem, chips = cpu + a.demand.cpu, mem + a.demand.memory, chips + a.demand.chips
            if cpu >= need.cpu and mem >= need.memory and chips >= need.chips:
                return victims
        return None

    def cost(self, victims: Iterable[Victim]) -> int:
        return sum(len(self.fleet.gang_members.get(a.gang_id, ())) if a.gang_id else 1
                   for _, a in victims)

    def at_risk(self, victims: Sequence[Victim]) -> float:
        """What evicting `victims` loses; among equally cheap choices the least is best.

        An evicted attempt loses its work since its last checkpoint. With the pass's `now`
        and each victim's start time and checkpoint interval, that is the chip-seconds
        since each one's last checkpoint ((now - started) mod interval: an attempt that
        just checkpointed loses almost nothing, however long it ran). A victim with no
        interval risks all it ran (now - started). Without `now`, the youngest oldest
        start is best (-start, the rule before intervals were known). inf when any start
        is unknown (those choices tie; the first found is taken); -inf for no victims."""
        if not victims:
            return -math.inf
        starts = [a.started_at for _, a in victims]
        if None in starts:
            return math.inf
        if self.now is None:
            return -min(starts)
        return sum(max(a.demand.chips, 1) * _since_checkpoint(a, self.now) for _, a in victims)

    def best_host(self, candidates: Sequence[int], need: Demand,
                  band: Band) -> tuple[int, list[Victim]] | None:
        best: tuple[int, float, int, list[Victim]] | None = None
        for i in candidates[:_MAX_SCAN]:
            victims = self.host_victims(i, need, band)
            if victims is None:
                continue
            c = self.cost(victims)
            if c > self.budget:
                continue
            risk = self.at_risk(victims)
            if best is None or (c, risk) < (best[0], best[1]):
                best = (c, risk, i, victims)
                # Without start times every 1-victim host is as good: take the first.
                if c <= 1 and risk in (math.inf, -math.inf):
                    break
        return None if best is None else (best[2], best[3])

    def slice_victims(self, members: Sequence[int], band: Band) -> list[Victim] | None:
        """What to evict so a gang of `band` gets every host of a slice, or None."""
        f = self.fleet
        victims = []
        for i in members:
            if f.blocked[i] or f.assigned[i] or f.slots[i] <= 0:
                return None
            for a in f.hosts[i].running:
                if self._gone(a):
                    continue
                if a.band <= band:
                    return None
                victims.append((i, a))
        return victims

    def evict(self, victims: Iterable[Victim], for_job: str, why: str) -> None:
        for host_index, v in victims:
            members = self.fleet.gang_members.get(v.gang_id, ()) if v.gang_id else ()
            for i, a in members or [(host_index, v)]:
                if a.attempt_id in self.evicted:
                    continue
                self.evicted.add(a.attempt_id)
                self.budget -= 1
                self.records.append(Preemption(a.attempt_id, a.task_id, a.job_id,
                                               self.fleet.hosts[i].host_id, a.band, a.gang_id,
                                               for_job, why))


def _since_checkpoint(a: RunningAttempt, now: float) -> float:
    ran = max(0.0, now - (a.started_at or 0.0))
    every = a.checkpoint_every
    return ran % every if every else ran
