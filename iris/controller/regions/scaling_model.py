"""The autoscaler kernel's vocabulary: its configuration, its input about each slice's hosts
(SliceUsage), its decisions (Create, Delete) and what it keeps of each slice (TrackedSlice,
Backoff). Data only; the rules are in autoscaler.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from iris.controller.providers.base import SliceState


@dataclass(frozen=True)
class AutoscalerConfig:
    # A task finishing frees its host within a few scheduler passes; 15 s hides such blips
    # and is small next to a TPU slice's multi-minute boot.
    scale_up_delay_s: float = 15.0
    # Work arrives in bursts and a new slice costs minutes of boot: 5 idle minutes are cheap.
    scale_down_delay_s: float = 300.0
    # Per (group, zone) after a failed create, doubling to the max: stock-outs last minutes
    # to hours, and GCP rate-limits callers that retry a stocked-out zone in a loop. Capped
    # at 5 min, not 30: preemptible capacity comes back a few hosts at a time, and a zone
    # kept full by demand fails every retry, so a 30 min cap left returning capacity idle
    # up to 30 min (bench.daytrace default day: 85.3% -> 87.1% of the upper bound). One
    # create call per group and zone every 5 min is far from a retry loop.
    backoff_initial_s: float = 60.0
    backoff_max_s: float = 300.0
    # A slice preempted younger than 10 min did little work; 3 of those in 10 min means the
    # zone is reclaiming as fast as we create, so stop creating for 30 min.
    churn_window_s: float = 600.0
    churn_limit: int = 3
    churn_cooldown_s: float = 1800.0
    # v4/v5 pod slices take 5-15 min to create plus the startup script's install: 20 min.
    boot_timeout_s: float = 1200.0
    # A worker restarting re-registers within seconds; a host gone a minute is gone.
    host_lost_grace_s: float = 60.0
    # False: READY alone means usable (simulated fleets have no workers to register).
    hosts_register: bool = True
    # Seconds between provider list calls in the shell (scaler.py); GCP lists one REST call
    # per zone, so 2 s keeps the view fresh without nearing the API's per-minute quota.
    poll_interval_s: float = 2.0
    # Entries of the decision log the dashboard shows.
    log_size: int = 50

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and (
                    value < 0 or math.isnan(value)):
                raise ValueError(f"AutoscalerConfig.{name}: must be >= 0, got {value}")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(f"AutoscalerConfig.backoff_max_s: must be >= backoff_initial_s "
                             f"({self.backoff_max_s} < {self.backoff_initial_s})")
        if self.churn_limit < 1 or self.log_size < 1:
            raise ValueError("AutoscalerConfig.churn_limit and log_size: must be >= 1")


@dataclass(frozen=True)
class SliceUsage:
    """What the controller knows about a slice's hosts right now."""

    registered: int  # hosts whose worker is registered with the controller
    busy: int  # hosts running at least one attempt (or held by a gang)
    registered_hosts: tuple[str, ...] = ()  # their host ids, if known: names a lost host


@dataclass(frozen=True)
class Create:
    group: str
    zone: str
    slice_id: str
    reason: str


@dataclass(frozen=True)
class Delete:
    slice_id: str
    group: str
    reason: str  # for people: "idle 300 s", "preempted", "lost host h3", "boot timeout"
    cause: str = ""  # for code: idle | preempted | failed | lost_host | boot_timeout | drain
    hosts: tuple[str, ...] = ()  # host ids of the slice: their attempts must be requeued


__all__ = ["AutoscalerConfig", "Create", "Delete", "SliceUsage"]


@dataclass
class TrackedSlice:
    """What the autoscaler keeps of one slice between decisions."""

    group: str
    zone: str
    born: float  # when the create was issued, or the slice first seen
    adopted: bool = False  # found in a list, not created by this autoscaler
    state: SliceState = SliceState.CREATING
    hosts: tuple[str, ...] = ()
    listed: bool = False
    deleting: bool = False
    ever_full: bool = False
    full_at: float = math.inf  # when its hosts had all registered
    ever_busy: bool = False
    retry_delete_at: float = -math.inf  # after a failed delete: not asked again before
    lost_since: float | None = None
    idle_since: float | None = None
    usage: SliceUsage = field(default_factory=lambda: SliceUsage(0, 0))
    detail: str = ""  # the provider's words (Slurm's pending reason, ...)
    draining: str = ""  # the provider wants no new work here: why


@dataclass
class Backoff:
    """A (group, zone) that failed a create: not tried again before `until`."""

    until: float
    delay: float  # the last delay used; 0 after a success, so the next failure starts small
    reason: str
