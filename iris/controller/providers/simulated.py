"""SimulatedProvider: thousands of fake hosts in one process. No processes, no sockets.

For scheduler scale tests and simulations: a slice is a small record whose state is a pure
function of the clock (created -> READY after `boot_delay_s`, PREEMPTED from its preemption
time on), so a FakeClock drives a fleet of thousands without a thread per host.

Preemptions are scripted (`preempt(slice_id, at=...)`) or random: with
`preemption_rate_per_hour` > 0 each preemptible slice draws an exponential lifetime from a
seeded RNG when it is created, so the same seed and the same calls give the same fleet.
Per-zone host capacity (`zone_capacity`, `set_capacity`) turns into CapacityError, the way
a stock-out does on GCP.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from iris.base.clock import Clock
from iris.base.errors import CapacityError, ConflictError, NotFoundError
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import HostInfo, SliceInfo, SliceState, check_create_request

_SECONDS_PER_HOUR = 3600.0


@dataclass
class _Slice:
    slice_id: str
    group: str
    zone: str
    preemptible: bool
    hosts: tuple[HostInfo, ...]
    ready_at: float  # monotonic seconds
    preempt_at: float  # monotonic seconds; inf = never
    draining: str = ""  # the site retires it (a Slurm node drained): why

    def state(self, now: float) -> SliceState:
        if now >= self.preempt_at:
            return SliceState.PREEMPTED
        return SliceState.READY if now >= self.ready_at else SliceState.CREATING

    def info(self, now: float) -> SliceInfo:
        return SliceInfo(slice_id=self.slice_id, group=self.group, zone=self.zone,
                         state=self.state(now), hosts=self.hosts, detail="simulated",
                         draining=self.draining)


class SimulatedProvider:
    """A Provider whose slices live in a dict; see the module docstring."""

    def __init__(
        self,
        clock: Clock,
        *,
        boot_delay_s: float = 0.0,
        zone_capacity: Mapping[str, int] | None = None,
        preemption_rate_per_hour: float = 0.0,
        seed: int = 0,
    ):
        if boot_delay_s < 0 or preemption_rate_per_hour < 0:
            raise ValueError("boot_delay_s and preemption_rate_per_hour must be >= 0")
        self._clock = clock
        self._boot_delay_s = boot_delay_s
        # hosts per zone; a zone not listed has no limit
        self._capacity: dict[str, int] = dict(zone_capacity or {})
        self._rate_per_s = preemption_rate_per_hour / _SECONDS_PER_HOUR
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._slices: dict[str, _Slice] = {}
        self._used: dict[str, int] = {}  # hosts held per zone, preempted slices included
        self._next_host = 0

    def create_slice(self, group: ScaleGroupConfig, zone: str, slice_id: str) -> SliceInfo:
        check_create_request(group, zone, slice_id)
        with self._lock:
            if slice_id in self._slices:
                raise ConflictError(f"slice {slice_id} already exists "
                                    f"(group {self._slices[slice_id].group})")
            used, limit = self._used.get(zone, 0), self._capacity.get(zone)
            if limit is not None and used + group.hosts_per_slice > limit:
                raise CapacityError(
                    f"zone {zone}: no capacity for {group.hosts_per_slice} more "
                    f"{group.accelerator_variant or group.accelerator_type} hosts "
                    f"({used} of {limit} in use)")
            now = self._clock.monotonic()
            ready_at = now + self._boot_delay_s
            record = _Slice(slice_id=slice_id, group=group.name, zone=zone,
                            preemptible=group.preemptible, hosts=self._new_hosts(slice_id, group),
                            ready_at=ready_at, preempt_at=self._draw_preemption(group, ready_at))
            self._slices[slice_id] = record
            self._used[zone] = used + group.hosts_per_slice
            return record.info(now)

    def delete_slice(self, slice_id: str) -> None:
        with self._lock:
            record = self._slices.pop(slice_id, None)
            if record is not None:
                self._used[record.zone] -= len(record.hosts)

    def list_slices(self, group: str | None = None) -> list[SliceInfo]:
        now = self._clock.monotonic()
        with self._lock:
            return [s.info(now) for s in self._slices.values() if group in (None, s.group)]

    def slice_status(self, slice_id: str) -> SliceInfo:
        with self._lock:
            record = self._slices.get(slice_id)
            return record.info(self._clock.monotonic()) if record else SliceInfo.not_found(slice_id)

    def close(self) -> None:
        pass

    def preempt(self, slice_id: str, at: float | None = None) -> None:
        """Script a preemption now, or at monotonic time `at` (the earliest one wins)."""
        with self._lock:
            record = self._slices.get(slice_id)
            if record is None:
                raise NotFoundError(f"no simulated slice {slice_id}")
            when = self._clock.monotonic() if at is None else at
            record.preempt_at = min(record.preempt_at, when)

    def drain(self, slice_id: str, why: str) -> None:
        """The site retires the slice gracefully (SliceInfo.draining): no new work there."""
        with self._lock:
            record = self._slices.get(slice_id)
            if record is None:
                raise NotFoundError(f"no simulated slice {slice_id}")
            record.draining = why

    def set_capacity(self, zone: str, hosts: int | None) -> None:
        """Limit `zone` to `hosts` hosts (0 = stock-out; None = unlimited). Existing slices stay."""
        with self._lock:
            if hosts is None:
                self._capacity.pop(zone, None)
            else:
                self._capacity[zone] = hosts

    def host_count(self) -> int:
        """Hosts currently held, in every state (what the bill would show)."""
        with self._lock:
            return sum(self._used.values())

    def _draw_preemption(self, group: ScaleGroupConfig, ready_at: float) -> float:
        if not group.preemptible or self._rate_per_s == 0:
            return math.inf
        return ready_at + self._rng.expovariate(self._rate_per_s)

    def _new_hosts(self, slice_id: str, group: ScaleGroupConfig) -> tuple[HostInfo, ...]:
        hosts = []
        for i in range(group.hosts_per_slice):
            n = self._next_host = self._next_host + 1
            address = f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"
            hosts.append(HostInfo(host_id=f"{slice_id}-w{i}", address=address))
        return tuple(hosts)


__all__ = ["SimulatedProvider"]
