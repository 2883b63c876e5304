"""The reservation ledger of ONE region: which whole hosts are held for which gang; pure.

No sockets, no threads, no clock: every call takes `now` (monotonic seconds) and the
region actor applies the reply. Guarantees, each checked by the kernel tests:

- a host is never in two live reservations (reserved or committed) at once;
- a reservation that is not committed stops holding anything at `expires_at`, whether
  or not `expire` is called (every call expires overdue holds first);
- every request is idempotent: reserve is keyed by (gang_id, attempt) and a retry gets
  the same token; an abort seen before its reserve leaves a tombstone that refuses it;
- `restarted` models a region crash: holds not committed vanish, committed ones (backed
  by running tasks the workers report again) survive, and old tokens stop working.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from iris.controller.gangs import ledger_delta
from iris.controller.gangs.protocol import (
    AbortRequest,
    CommitRefused,
    CommitRequest,
    Committed,
    Refused,
    RegionReply,
    RegionRequest,
    Released,
    ReleaseRequest,
    Reserved,
    ReserveRequest,
)
from iris.controller.scheduling.constraints import matches_all, normalize_value
from iris.controller.scheduling.model import GangShape, HostView, pool_of

# Tombstones of ended reservations answer late duplicates. 10 minutes is far beyond any
# retry or lease Iris uses (leases are seconds), and bounds memory at ~one entry per gang
# attempt in that window.
TOMBSTONE_TTL_S = 600.0


@dataclass(frozen=True)
class SliceSpec:
    """A slice (or a lone host, as a slice of one) the region owns."""

    slice_id: str
    accelerator: str | None
    hosts: tuple[str, ...]
    attributes: Mapping[str, object] = field(default_factory=dict)


def slices_from_hosts(hosts: Iterable[HostView]) -> list[SliceSpec]:
    """The ledger inventory of a region from the hosts the scheduler sees (one region)."""
    groups: dict[str, list[HostView]] = {}
    for h in hosts:
        groups.setdefault(h.slice_id or h.host_id, []).append(h)
    return [SliceSpec(sid, hs[0].accelerator, tuple(h.host_id for h in hs),
                      hs[0].all_attributes()) for sid, hs in groups.items()]


class State(enum.Enum):
    RESERVED = "reserved"
    COMMITTED = "committed"
    ABORTED = "aborted"
    EXPIRED = "expired"
    RELEASED = "released"


LIVE = (State.RESERVED, State.COMMITTED)


@dataclass
class Reservation:
    key: tuple[str, int]
    token: str | None
    hosts: tuple[str, ...]
    state: State
    expires_at: float
    ended_at: float = 0.0


class ReservationLedger:
    """Holds of whole hosts for gangs in one region. Mutable, deterministic, clock-free."""

    def __init__(self, region: str, slices: Iterable[SliceSpec], *, boot: str = "0",
                 tombstone_ttl_s: float = TOMBSTONE_TTL_S):
        self.region = region
        self.boot = boot
        self._ttl = tombstone_ttl_s
        self._slices: dict[str, SliceSpec] = {}
        self._host_slice: dict[str, str] = {}
        self._attrs: dict[str, dict[str, str]] = {}
        self._busy: set[str] = set()
        self._taken: dict[str, str] = {}  # host -> token of the live reservation on it
        self._unavailable: dict[str, int] = {}
        self._free_slices: dict[str | None, dict[str, None]] = {}
        self._free_hosts: dict[str | None, dict[str, None]] = {}
        for spec in slices:
            if spec.slice_id in self._slices:
                raise ValueError(f"slice {spec.slice_id!r} is listed twice in region {region!r}")
            self._add_slice(spec)
        # Outcomes since this ledger was made, for /metrics (iris_gang_reservations_total).
        self.counts = dict.fromkeys(("reserved", "committed", "aborted", "expired",
                                     "released"), 0)
        self._by_key: dict[tuple[str, int], Reservation] = {}
        self._by_token: dict[str, Reservation] = {}
        self._expiry: list[tuple[float, int, tuple[str, int]]] = []
        self._ended: deque[tuple[float, tuple[str, int]]] = deque()
        self._seq = 0

    # ---- requests -------------------------------------------------------------------

    def handle(self, request: RegionRequest, now: float) -> RegionReply | None:
        """Apply one request from the coordinator; the reply to send back (None for abort)."""
        if isinstance(request, ReserveRequest):
            return self.reserve(request.gang_id, request.attempt, request.shape,
                                request.lease_s, now)
        if isinstance(request, CommitRequest):
            return self.commit(request.gang_id, request.attempt, request.token, now)
        if isinstance(request, AbortRequest):
            self.abort(request.gang_id, request.attempt, now)
            return None
        if isinstance(request, ReleaseRequest):
            return self.release(request.gang_id, request.token, now)
        raise TypeError(f"ledger cannot handle {type(request).__name__}")

    def reserve(self, gang_id: str, attempt: int, shape: GangShape, lease_s: float,
                now: float) -> Reserved | Refused:
        self.expire(now)
        key = (gang_id, attempt)
        if not isinstance(shape, GangShape) or not lease_s > 0:
            return Refused(self.region, gang_id, attempt, "INVALID",
                           f"reserve needs a GangShape and a lease > 0 s, got "
                           f"{type(shape).__name__} and {lease_s!r}")
        old = self._by_key.get(key)
        if old is not None:
            if old.state in LIVE and old.token is not None:
                return Reserved(self.region, gang_id, attempt, old.token, old.hosts,
                                old.expires_at)
            return Refused(self.region, gang_id, attempt, old.state.name,
                           f"attempt {attempt} of gang {gang_id} was already {old.state.value}")
        hosts = self._pick(shape)
        if isinstance(hosts, Refused):
            return Refused(self.region, gang_id, attempt, hosts.code, hosts.reason)
        self._seq += 1
        token = f"{self.region}/{self.boot}/{self._seq}"
        res = Reservation(key, token, hosts, State.RESERVED, now + lease_s)
        self._by_key[key] = res
        self._by_token[token] = res
        for h in hosts:
            self._take(h, token)
        heapq.heappush(self._expiry, (res.expires_at, self._seq, key))
        self.counts["reserved"] += 1
        return Reserved(self.region, gang_id, attempt, token, hosts, res.expires_at)

    def commit(self, gang_id: str, attempt: int, token: str,
               now: float) -> Committed | CommitRefused:
        self.expire(now)
        res = self._by_token.get(token)
        if res is None or res.key != (gang_id, attempt):
            return CommitRefused(self.region, gang_id, attempt, token, "UNKNOWN_TOKEN",
                                 f"region {self.region} holds no reservation {token} for "
                                 f"gang {gang_id} (it restarted, or the hold ended long ago)")
        if res.state is State.RESERVED:
            res.state = State.COMMITTED
            self.counts["committed"] += 1
        if res.state is State.COMMITTED:
            return Committed(self.region, gang_id, attempt, token, res.hosts)
        return CommitRefused(self.region, gang_id, attempt, token, res.state.name,
                             f"reservation {token} was already {res.state.value}")

    def abort(self, gang_id: str, attempt: int, now: float) -> None:
        """Drop the hold of this attempt if not committed; remember the abort either way."""
        self.expire(now)
        key = (gang_id, attempt)
        res = self._by_key.get(key)
        if res is None:
            res = Reservation(key, None, (), State.ABORTED, now)
            self._by_key[key] = res
            self._end(res, State.ABORTED, now)
        elif res.state is State.RESERVED:
            self._end(res, State.ABORTED, now)

    def release(self, gang_id: str, token: str, now: float) -> Released:
        """Free the hosts of a committed gang that has finished (idempotent)."""
        self.expire(now)
        res = self._by_token.get(token)
        if res is not None and res.key[0] == gang_id and res.state in LIVE:
            self._end(res, State.RELEASED, now)
        return Released(self.region, gang_id, token)

    def expire(self, now: float) -> list[str]:
        """End every uncommitted hold whose lease ran out; returns their tokens."""
        expired = []
        while self._expiry and self._expiry[0][0] <= now:
            expires_at, _, key = heapq.heappop(self._expiry)
            res = self._by_key.get(key)
            if res is not None and res.state is State.RESERVED and res.expires_at == expires_at:
                self._end(res, State.EXPIRED, now)
                expired.append(res.token)
        while self._ended and self._ended[0][0] + self._ttl <= now:
            _, key = self._ended.popleft()
            res = self._by_key.pop(key, None)
            if res is not None and res.token is not None:
                self._by_token.pop(res.token, None)
        return expired

    def next_expiry(self) -> float | None:
        """When the actor should call `expire` next (None: no uncommitted hold)."""
        while self._expiry:
            expires_at, _, key = self._expiry[0]
            res = self._by_key.get(key)
            if res is not None and res.state is State.RESERVED and res.expires_at == expires_at:
                return expires_at
            heapq.heappop(self._expiry)
        return None

    # ---- inventory --------------------------------------------------------------------

    def set_inventory(self, slices: Iterable[SliceSpec], busy: Iterable[str] = ()) -> None:
        """Make the region own exactly `slices`, with `busy` the hosts running other work.

        Hosts come and go as workers register and are lost; a slice whose hosts changed is
        replaced. Live reservations keep their hosts until they end, even if those hosts
        left the inventory, so a host is never offered twice while its gang is settling.
        """
        wanted = {spec.slice_id: spec for spec in slices}
        for sid in [sid for sid, spec in self._slices.items() if wanted.get(sid) != spec]:
            self._remove_slice(sid)
        for sid, spec in wanted.items():
            if sid not in self._slices:
                self._add_slice(spec)
        busy_now = {h for h in busy if h in self._host_slice}
        # Sorted: the order hosts come free is the order they are offered, and a set's
        # order changes with each process's string hashing, so a day replayed twice
        # (bench.daytrace, same seed) placed gangs on different slices.
        self.set_busy(sorted(self._busy - busy_now), False)
        self.set_busy(sorted(busy_now - self._busy), True)

    def apply_delta(self, slices: Iterable[SliceSpec] = (), removed: Iterable[str] = (),
                    busy: Iterable[str] = (), free: Iterable[str] = ()) -> None:
        """Change the inventory by what changed: `slices` added or replaced whole, slice ids
        `removed`, hosts now `busy` and now `free`. O(the slices and hosts named).

        The same rules as set_inventory: a replaced slice's hosts keep their busy flag if
        they are still here, a host that left loses it, and live reservations keep their
        hosts. Checked whole first: a ValueError names the problem and nothing changes.
        """
        slices, removed = list(slices), list(removed)
        busy, free = sorted(set(busy)), sorted(set(free))
        self.check_delta(slices, removed, busy, free)
        touched = set(removed) | {s.slice_id for s in slices if s.slice_id in self._slices}
        was_busy = {h for sid in touched for h in self._slices[sid].hosts if h in self._busy}
        for sid in sorted(touched):
            self._remove_slice(sid)
        for spec in slices:
            self._add_slice(spec)
        self.set_busy(free, False)
        kept = sorted(h for h in was_busy if h in self._host_slice and h not in free)
        self.set_busy(kept, True)
        self.set_busy(busy, True)

    def check_delta(self, slices: list[SliceSpec], removed: Iterable[str],
                    busy: Iterable[str], free: Iterable[str],
                    present: Mapping[str, Iterable[str]] | None = None) -> None:
        """ValueError naming the first problem of a delta (ledger_delta.py), else None.
        `present`: more named lists of hosts that must be in the inventory it leaves."""
        problem = ledger_delta.problem(self.region, self._slices, self._host_slice,
                                       list(slices), list(removed), list(busy), list(free),
                                       present or {})
        if problem is not None:
            raise ValueError(problem)

    def inventory(self) -> dict:
        """What this ledger owns, as plain sets (for comparisons; O(region)): slices,
        busy hosts, hosts free to reserve and whole slices free to reserve."""
        return {"slices": dict(self._slices), "busy": frozenset(self._busy),
                "free_hosts": frozenset(h for hosts in self._free_hosts.values() for h in hosts),
                "free_slices": frozenset(s for ss in self._free_slices.values() for s in ss)}

    def set_busy(self, host_ids: Iterable[str], busy: bool) -> None:
        """Hosts running work placed outside gangs; a busy host is never reserved."""
        for h in host_ids:
            if h not in self._host_slice:
                raise KeyError(f"host {h!r} is not in region {self.region!r}")
            if busy and h not in self._busy:
                was_free = h not in self._taken
                self._busy.add(h)
                if was_free:
                    self._mark(h, available=False)
            elif not busy and h in self._busy:
                self._busy.discard(h)
                if h not in self._taken:
                    self._mark(h, available=True)

    def restarted(self, boot: str) -> ReservationLedger:
        """The ledger after a crash and restart: committed gangs survive, holds do not."""
        fresh = ReservationLedger(self.region, self._slices.values(), boot=boot,
                                  tombstone_ttl_s=self._ttl)
        fresh.set_busy(sorted(self._busy), True)
        for res in self._by_token.values():
            if res.state is State.COMMITTED:
                kept = Reservation(res.key, res.token, res.hosts, State.COMMITTED, 0.0)
                fresh._by_key[res.key] = kept
                fresh._by_token[res.token] = kept
                for h in res.hosts:
                    fresh._take(h, res.token)
        return fresh

    def live(self, now: float) -> list[Reservation]:
        """Reservations holding hosts at `now` (committed, or reserved and not yet expired)."""
        return [r for r in self._by_token.values()
                if r.state is State.COMMITTED
                or (r.state is State.RESERVED and r.expires_at > now)]

    def holder(self, host_id: str) -> str | None:
        return self._taken.get(host_id)

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self._host_slice)

    # ---- internals --------------------------------------------------------------------

    def _add_slice(self, spec: SliceSpec) -> None:
        for h in spec.hosts:
            if h in self._host_slice:
                raise ValueError(f"host {h!r} is in two slices of region {self.region!r}")
        attrs = {k: normalize_value(v) for k, v in spec.attributes.items()}
        attrs["region"] = self.region
        if spec.accelerator:
            attrs.setdefault("accelerator", spec.accelerator)
        sid = spec.slice_id
        self._slices[sid] = spec
        self._attrs[sid] = attrs
        self._unavailable[sid] = 0
        self._free_slices.setdefault(spec.accelerator, {})[sid] = None
        self._free_hosts.setdefault(spec.accelerator, {}).update(dict.fromkeys(spec.hosts))
        for h in spec.hosts:
            self._host_slice[h] = sid
            if h in self._taken:  # came back while its reservation is still live
                self._mark(h, available=False)

    def _remove_slice(self, sid: str) -> None:
        spec = self._slices.pop(sid)
        self._free_slices.get(spec.accelerator, {}).pop(sid, None)
        for h in spec.hosts:
            self._free_hosts.get(spec.accelerator, {}).pop(h, None)
            self._host_slice.pop(h, None)
            self._busy.discard(h)
        del self._unavailable[sid], self._attrs[sid]

    def _pick(self, shape: GangShape) -> tuple[str, ...] | Refused:
        if shape.whole_slices:
            chosen: list[str] = []
            slices = 0
            per_slice = shape.hosts // shape.whole_slices
            for sid in self._free_slices.get(shape.accelerator, {}):
                spec = self._slices[sid]
                if len(spec.hosts) != per_slice:
                    continue  # a slice still booting (or losing) hosts is not whole
                if shape.constraints and not matches_all(shape.constraints, self._attrs[sid]):
                    continue
                chosen.extend(spec.hosts)
                slices += 1
                if slices == shape.whole_slices:
                    break
            if slices == shape.whole_slices and len(chosen) == shape.hosts:
                return tuple(chosen)
            return self._refusal(shape, f"{shape.whole_slices} free whole "
                                        f"{shape.accelerator} slice(s) of {shape.hosts} hosts")
        pools: dict[str, list[str]] = {}
        for h in self._free_hosts.get(shape.accelerator, {}):
            attrs = self._attrs[self._host_slice[h]]
            if shape.constraints and not matches_all(shape.constraints, attrs):
                continue
            chosen = pools.setdefault(pool_of(attrs) if shape.one_pool else "", [])
            chosen.append(h)
            if len(chosen) == shape.hosts:
                return tuple(chosen)
        where = " in one pool" if shape.one_pool else ""
        return self._refusal(shape, f"{shape.hosts} free {shape.accelerator or 'cpu'} "
                                    f"hosts{where}")

    def _refusal(self, shape: GangShape, wanted: str) -> Refused:
        known = any(s.accelerator == shape.accelerator
                    and matches_all(shape.constraints, self._attrs[s.slice_id])
                    for s in self._slices.values())
        code = "NO_CAPACITY" if known else "CONSTRAINT_UNMATCHED"
        return Refused(self.region, "", 0, code, f"region {self.region} has not {wanted}")

    def _take(self, host: str, token: str) -> None:
        if host in self._taken:
            raise AssertionError(f"host {host} already held by {self._taken[host]}")
        self._taken[host] = token
        if host not in self._busy and host in self._host_slice:
            self._mark(host, available=False)

    def _end(self, res: Reservation, state: State, now: float) -> None:
        for h in res.hosts:
            if self._taken.get(h) == res.token:
                del self._taken[h]
                if h not in self._busy and h in self._host_slice:  # else: left the inventory
                    self._mark(h, available=True)
        if res.token is not None:
            self.counts[state.value] += 1
        res.state = state
        res.ended_at = now
        self._ended.append((now, res.key))

    def _mark(self, host: str, available: bool) -> None:
        sid = self._host_slice[host]
        acc = self._slices[sid].accelerator
        if available:
            self._free_hosts[acc][host] = None
            self._unavailable[sid] -= 1
            if self._unavailable[sid] == 0:
                self._free_slices[acc][sid] = None
        else:
            self._free_hosts[acc].pop(host, None)
            self._unavailable[sid] += 1
            self._free_slices[acc].pop(sid, None)
