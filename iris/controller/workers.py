"""The controller's view of its workers: who they are, what they offer, whether they are alive.

Pure: `now` is passed in; no sockets. A worker is alive while it is heard from (registration,
heartbeat, any report); silent for `dead_after_s` it is declared lost and removed, and the
kernel requeues its attempts. What is in use on a worker is not kept here: it is derived
from the attempts the kernel wants running there (placement.py), so it cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iris.base.errors import ConflictError, InvalidRequestError
from iris.wire.fencing import REPORT_INTERVAL_MAX_S, SILENT_LOST_S, late_after_s

# A *silent* worker (partition, freeze, blip) is lost only after this long: its lease lapsed
# and its attempts were stopped well before (wire/fencing.py). A *dead* worker process is
# reported by its watchdog, and a stopping one says goodbye: both are lost at once.
DEFAULT_DEAD_AFTER_S = SILENT_LOST_S
# A worker id heard from at another address this recently is live there: a second
# registration under it is refused (two workers sharing one work directory's id).
LIVE_ELSEWHERE_S = 5.0
# The controller's own loop counts as stalled when a tick comes this much later than due;
# silence during a stall is not the workers' fault (overload must not look like loss).
STALL_S = 1.0
# Reports a second the controller asks of its fleet: hosts report every second up to this
# many hosts, and every hosts/REPORTS_PER_S seconds beyond (at most REPORT_INTERVAL_MAX_S,
# 3 s: 10,000 hosts then send ~3,300 a second). A report that changes nothing costs ~40 us
# here in a batch (bench/RESULTS.md, Fleet), so 2,000 a second is under a tenth of a core.
REPORTS_PER_S = 2000.0
# A tick this much later than due means the controller is behind: it asks for the longest
# interval for BEHIND_HOLD_S, so that its own lag does not bring more traffic.
BEHIND_LATE_S = 0.25
BEHIND_HOLD_S = 10.0
# Silent workers are looked for this often, not on every 50 ms tick: the walk over 10,000
# workers costs ~3 ms, and a loss noticed 0.5 s later is nothing next to the 30 s rule.
SCAN_EVERY_S = 0.5


def report_interval_s(hosts: int, behind: bool) -> float:
    """Seconds between a worker's reports, told in each report's answer (docs/protocol.md)."""
    if behind:
        return REPORT_INTERVAL_MAX_S
    return min(REPORT_INTERVAL_MAX_S, max(1.0, hosts / REPORTS_PER_S))


@dataclass(slots=True)  # one per host: 10,000 of them, no __dict__ each
class WorkerInfo:
    worker_id: str
    address: str
    region: str
    attributes: dict[str, str]
    cpu: float
    memory_bytes: int
    accelerators: int
    registered_at: float
    last_heard: float
    stalled_at_heard: float = 0.0  # the table's `stalled` when it was last heard
    # The report interval it was last asked to use (each report's answer says it); until
    # its first answer, the longest one: a worker is never called late for our guess.
    asked_s: float = REPORT_INTERVAL_MAX_S
    _row: dict | None = field(default=None, repr=False, compare=False)

    def as_dict(self, now: float, stalled: float = 0.0) -> dict:
        """A new dict each call; its `attributes` is the worker's own (the table's copy,
        made at registration), shared between calls: read, never written. The fixed part
        is built once per registration: the snapshot lists every worker every 0.5-2 s, and
        copying each one's attributes was half of a 2,000-host controller's idle CPU."""
        if self._row is None:
            self._row = {
                "worker_id": self.worker_id, "address": self.address, "region": self.region,
                "attributes": self.attributes, "cpu": self.cpu,
                "memory_bytes": self.memory_bytes, "accelerators": self.accelerators}
        # Late (fencing.late_after_s): its silence, less the controller's own stalls since
        # it was last heard (`stalled`: the table's), past the interval it was asked for.
        heard_ago = now - self.last_heard
        late_after = late_after_s(self.asked_s)
        row = self._row.copy()
        row["last_heard_s_ago"] = round(heard_ago, 3)
        row["report_interval_s"] = self.asked_s
        row["late_after_s"] = late_after
        row["late"] = heard_ago - (stalled - self.stalled_at_heard) > late_after
        return row


class WorkerTable:
    def __init__(self, dead_after_s: float = DEFAULT_DEAD_AFTER_S):
        self.dead_after_s = dead_after_s
        self.workers: dict[str, WorkerInfo] = {}
        # Seconds the controller itself could not listen (ticks late by more than STALL_S):
        # subtracted from every worker's silence.
        self.stalled = 0.0
        self._last_tick: float | None = None
        self._behind_until = float("-inf")
        self._scanned_at = float("-inf")

    def register(self, worker_id: str, address: str, attributes: dict, now: float) -> WorkerInfo:
        """Add or refresh a worker; a re-registration keeps what was promised on it."""
        if not isinstance(attributes, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
            raise InvalidRequestError("attributes: must map strings to strings", "attributes")
        cpu = _number(attributes, "cpu", 1.0)
        memory = int(_number(attributes, "memory", 0))
        accelerators = int(_number(attributes, "accelerator_count", 0))
        old = self.workers.get(worker_id)
        if old is not None and old.address != address and \
                now - old.last_heard - (self.stalled - old.stalled_at_heard) < LIVE_ELSEWHERE_S:
            raise ConflictError(
                f"worker id {worker_id} is live at {old.address} (heard "
                f"{now - old.last_heard:.1f} s ago); a second worker cannot register under it "
                "(do two workers share one --work-dir?)")
        info = WorkerInfo(worker_id, address, attributes.get("region", "local"), dict(attributes),
                          cpu, memory, accelerators, old.registered_at if old else now, now,
                          self.stalled)
        self.workers[worker_id] = info
        if self._last_tick is None:  # listening from now: a stall before the first tick counts
            self._last_tick = now
        return info

    def heard(self, worker_id: str, now: float, asked_s: float | None = None) -> bool:
        """It spoke now; `asked_s`: the report interval its answer asks of it."""
        info = self.workers.get(worker_id)
        if info is None:
            return False
        info.last_heard = now
        if asked_s is not None:
            info.asked_s = asked_s
        info.stalled_at_heard = self.stalled
        return True

    def behind(self, now: float) -> bool:
        """Did a tick come late (the controller falling behind) in the last BEHIND_HOLD_S?"""
        return now < self._behind_until

    def lost(self, now: float, tick_s: float = 0.05) -> list[str]:
        """Workers silent too long while the controller could listen; they are removed.
        `tick_s`: how often this is called, to tell a late tick."""
        if self._last_tick is not None and now - self._last_tick > tick_s + BEHIND_LATE_S:
            self._behind_until = now + BEHIND_HOLD_S
        if self._last_tick is not None and now - self._last_tick > STALL_S:
            self.stalled += now - self._last_tick
        self._last_tick = now
        if now - self._scanned_at < SCAN_EVERY_S:
            return []
        self._scanned_at = now
        dead = [w for w, info in self.workers.items()
                if now - info.last_heard - (self.stalled - info.stalled_at_heard)
                > self.dead_after_s]
        for worker_id in dead:
            del self.workers[worker_id]
        return dead


def _number(attributes: dict, key: str, default: float) -> float:
    raw = attributes.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequestError(f"attributes.{key}: not a number: {raw!r}", key) from None
    if value < 0:
        raise InvalidRequestError(f"attributes.{key}: must be >= 0", key)
    return value
