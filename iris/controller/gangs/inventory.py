"""Each region's inventory as the controller keeps it between pushes, and what changed since
the last push. Pure: no sockets, no clock; state and events in, pushes out.

Not the ledger (ledger.py, the region's side) nor the decision of when to push (the service,
controller/region_pushes.py). The inventory of a region is what `region_inventory` (below)
computes from scratch (slices of registered hosts, hosts busy with attempts running or
stopping) plus the hosts that are draining and run nothing; here it is kept from one fact per
host, given again whenever something about the host may have changed:

    event                          when the service gives it
    HostIs(host, facts)            registered or re-registered, an attempt started or ended
                                   there, a stop began or ended there, a drain began or ended
    HostGone(host)                 lost, said goodbye, its slice deleted

so a push costs what changed since the last one, not the fleet: at 10,000 hosts the whole
inventory was 200 ms to build, send and check (bench/RESULTS.md, "Inventory deltas").

A push is a `Delta` (slices added or changed, slices removed, hosts now busy / free, hosts
now drained / no longer, the demand if changed) numbered by `seq` per (incarnation, region):
the Region applies a delta only if it follows the last push it applied. A region new to
this controller, or one that refused a push (it restarted, a push was lost), gets the whole
inventory (`Full`) instead, when the service allows one (fulls are still O(region)).

Rules the Region side relies on: a host's busy and drained flags are kept only while the
host is in the region's inventory (a host leaving it is dropped silently on both sides), and
a slice's row is sent whole whenever its hosts or its first host's attributes changed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the controller's records, read here by field only
    from iris.base.resources import Resources
    from iris.controller.jobs.state import KernelState
    from iris.controller.workers import WorkerInfo

_HOST_INDEX = re.compile(r"^(.*)-[hw](\d+)$")


@dataclass(frozen=True)
class Facts:
    """What a region is told about one registered host."""

    region: str
    slice_id: str
    attributes: Mapping[str, str]
    busy: bool  # running attempts or stopping some
    draining: bool  # asked to drain (a region will delete its slice)


@dataclass(frozen=True)
class HostIs:
    host: str
    facts: Facts


@dataclass(frozen=True)
class HostGone:
    host: str


@dataclass(frozen=True)
class Full:
    """The whole inventory of a region (region_pushes.SyncRegion carries it to the Region)."""

    region: str
    incarnation: str
    seq: int
    slices: list[dict]
    busy: list[str]
    unmet: dict[str, int]
    drained: list[str]


@dataclass(frozen=True)
class Delta:
    """What changed in a region since push `seq - 1` of the same incarnation."""

    region: str
    incarnation: str
    seq: int
    slices: list[dict] = field(default_factory=list)  # added or changed, whole
    removed: list[str] = field(default_factory=list)  # slice ids
    busy: list[str] = field(default_factory=list)  # hosts now busy
    free: list[str] = field(default_factory=list)  # hosts no longer busy
    unmet: dict[str, int] | None = None  # the demand, when it changed
    drained: list[str] = field(default_factory=list)  # draining hosts now running nothing
    undrained: list[str] = field(default_factory=list)  # no longer drained


@dataclass
class RegionInventory:
    """One region: its slices now, what the Region was last told, what changed since."""

    members: dict[str, set[str]] = field(default_factory=dict)  # slice id -> hosts now
    hosts: int = 0  # how many, kept with `members`
    pushed_rows: dict[str, dict] = field(default_factory=dict)  # slice id -> row last sent
    pushed_busy: set[str] = field(default_factory=set)
    pushed_drained: set[str] = field(default_factory=set)
    pushed_unmet: dict[str, int] = field(default_factory=dict)
    dirty_slices: set[str] = field(default_factory=set)
    dirty_hosts: set[str] = field(default_factory=set)
    seq: int = 0
    full_due: bool = True  # new to this controller: its Region holds nothing from us yet
    full_seq: int = 0  # the seq of the last full push


@dataclass
class InventoryState:
    incarnation: str
    hosts: dict[str, Facts] = field(default_factory=dict)
    regions: dict[str, RegionInventory] = field(default_factory=dict)


def handle(state: InventoryState, event: HostIs | HostGone) -> None:
    """Record one host's facts now; marks what a push must look at. O(1)."""
    old = state.hosts.get(event.host)
    new = event.facts if isinstance(event, HostIs) else None
    if old == new:
        return
    for facts in (old, new):
        if facts is not None:
            inv = region(state, facts.region)
            inv.dirty_hosts.add(event.host)
    # Its slice row changes only if the host moved or its attributes did (busy and
    # draining are flags beside the rows).
    moved = old is None or new is None or _place(old) != _place(new)
    if old is not None and moved:
        inv = state.regions[old.region]
        inv.members[old.slice_id].discard(event.host)
        inv.hosts -= 1
        inv.dirty_slices.add(old.slice_id)
    if new is None:
        del state.hosts[event.host]
        return
    state.hosts[event.host] = new
    if moved:
        inv = state.regions[new.region]
        inv.members.setdefault(new.slice_id, set()).add(event.host)
        inv.hosts += 1
        inv.dirty_slices.add(new.slice_id)


def region(state: InventoryState, name: str) -> RegionInventory:
    """A region's inventory, made empty (and due a full push) on first mention."""
    inv = state.regions.get(name)
    if inv is None:
        inv = state.regions[name] = RegionInventory()
    return inv


def size(state: InventoryState, name: str) -> int:
    """Hosts in a region now (what a full push of it carries)."""
    return state.regions[name].hosts


def push(state: InventoryState, name: str, unmet: Mapping[str, int],
         full: bool, keepalive: bool = False) -> Full | Delta | None:
    """What to send region `name` now: the whole inventory when `full`, else what changed
    since the last push (None when nothing did, unless `keepalive`: then an empty delta,
    which a Region that lost our pushes refuses). Either way, what is returned becomes what
    the region was last told. O(what changed) for a delta."""
    inv = region(state, name)
    if full:
        return _full(state, name, inv, unmet)
    slices, removed = [], []
    for sid in sorted(inv.dirty_slices):
        hosts = inv.members.get(sid)
        if not hosts:
            inv.members.pop(sid, None)
            if inv.pushed_rows.pop(sid, None) is not None:
                removed.append(sid)
            continue
        row = slice_row(sid, hosts, state.hosts)
        if inv.pushed_rows.get(sid) != row:
            inv.pushed_rows[sid] = row
            slices.append(row)
    flips: tuple[list[str], ...] = ([], [], [], [])  # busy, free, drained, undrained
    for host in sorted(inv.dirty_hosts):
        facts = state.hosts.get(host)
        if facts is None or facts.region != name:
            # It left the region's inventory (its slice's row above says so), and the Region
            # drops a leaving host's flags itself.
            inv.pushed_busy.discard(host)
            inv.pushed_drained.discard(host)
            continue
        _flip(inv.pushed_busy, host, facts.busy, flips[0], flips[1])
        _flip(inv.pushed_drained, host, facts.draining and not facts.busy, flips[2], flips[3])
    new_unmet = None
    if dict(unmet) != inv.pushed_unmet:
        inv.pushed_unmet = new_unmet = dict(unmet)
    inv.dirty_slices.clear()
    inv.dirty_hosts.clear()
    if not (slices or removed or any(flips) or new_unmet is not None or keepalive):
        return None
    inv.seq += 1
    return Delta(name, state.incarnation, inv.seq, slices, removed, flips[0], flips[1],
                 new_unmet, flips[2], flips[3])


def refused(state: InventoryState, name: str, seq: int) -> bool:
    """A push to `name` failed (refused, or lost): the Region needs the whole inventory,
    unless a full push was already sent after that one. True if a full push is now due."""
    inv = region(state, name)
    if seq < inv.full_seq:
        return False  # an older push: the full one sent since repairs it
    inv.full_due = True
    return True


def full_due(state: InventoryState) -> list[str]:
    return sorted(n for n, inv in state.regions.items() if inv.full_due)


def whole(state: InventoryState, name: str) -> tuple[list[dict], list[str], list[str]]:
    """The region's slices (sorted by id), busy and drained hosts (sorted), from scratch
    over the region (not the fleet): what a full push carries."""
    inv = region(state, name)
    rows = [slice_row(sid, hosts, state.hosts)
            for sid, hosts in sorted(inv.members.items()) if hosts]
    busy, drained = [], []
    for row in rows:
        for host in row["hosts"]:
            b, d = _flags(state.hosts.get(host), name)
            if b:
                busy.append(host)
            if d:
                drained.append(host)
    return rows, sorted(busy), sorted(drained)


def slice_row(sid: str, hosts: Iterable[str], facts: Mapping[str, Facts]) -> dict:
    """A slice as the Region is told it: hosts in index order, the first one's attributes."""
    ordered = sorted(hosts, key=host_order)
    attrs = dict(facts[ordered[0]].attributes)
    # Every attribute: a gang's constraints may name any of them ("team": "a"), and a
    # region that does not know one could never match it (it waited forever).
    return {"slice_id": sid, "accelerator": attrs.get("accelerator_type") or None,
            "hosts": ordered, "attributes": attrs}


def host_order(host_id: str) -> tuple:
    """Hosts of a slice in their index order (h2 before h10; local hosts end -hN, TPU VM
    workers -wN): TPU process ids follow it. The id breaks ties (s-h1 and s-w1)."""
    m = _HOST_INDEX.match(host_id)
    return (m.group(1), int(m.group(2)), host_id) if m else (host_id, 0, host_id)


# ---- internals ------------------------------------------------------------------------


def _full(state: InventoryState, name: str, inv: RegionInventory,
          unmet: Mapping[str, int]) -> Full:
    rows, busy, drained = whole(state, name)
    for sid in [s for s, hosts in inv.members.items() if not hosts]:
        del inv.members[sid]
    inv.pushed_rows = {row["slice_id"]: row for row in rows}
    inv.pushed_busy, inv.pushed_drained = set(busy), set(drained)
    inv.pushed_unmet = dict(unmet)
    inv.dirty_slices.clear()
    inv.dirty_hosts.clear()
    inv.seq += 1
    inv.full_due, inv.full_seq = False, inv.seq
    return Full(name, state.incarnation, inv.seq, rows, busy, dict(unmet), drained)


def _place(facts: Facts) -> tuple:
    return facts.region, facts.slice_id, facts.attributes


def _flags(facts: Facts | None, name: str) -> tuple[bool, bool]:
    """(busy, drained) of a host as region `name` knows it; both False once it left."""
    if facts is None or facts.region != name:
        return False, False
    return facts.busy, facts.draining and not facts.busy


def _flip(pushed: set[str], host: str, now: bool, on: list[str], off: list[str]) -> None:
    if now and host not in pushed:
        pushed.add(host)
        on.append(host)
    elif not now and host in pushed:
        pushed.discard(host)
        off.append(host)


# ---- from the controller's records (the facts of one worker; a whole region from scratch)

def host_facts(state: KernelState, w: WorkerInfo, stopping: Mapping[str, Mapping],
               draining: Collection[str]) -> Facts:
    """One registered worker as its region's inventory sees it (inventory.Facts)."""
    return Facts(w.region, w.attributes.get("slice_id") or w.worker_id, w.attributes,
                     bool(state.by_worker.get(w.worker_id) or stopping.get(w.worker_id)),
                     w.worker_id in draining)


def region_inventory(state: KernelState, workers: Iterable[WorkerInfo],
                     stopping: dict[str, dict[str, Resources]],
                     ) -> dict[str, tuple[list[dict], list[str]]]:
    """Per region: its slices ({"slice_id", "accelerator", "hosts", "attributes"}; a worker
    outside any slice is a slice of one) and the hosts running or stopping attempts."""
    slices: dict[str, dict[str, list[WorkerInfo]]] = {}
    busy: dict[str, list[str]] = {}
    for w in workers:
        sid = w.attributes.get("slice_id") or w.worker_id
        slices.setdefault(w.region, {}).setdefault(sid, []).append(w)
        if state.by_worker.get(w.worker_id) or stopping.get(w.worker_id):
            busy.setdefault(w.region, []).append(w.worker_id)
    out = {}
    for region, by_slice in slices.items():
        rows = []
        for sid, hosts in sorted(by_slice.items()):
            hosts.sort(key=lambda w: host_order(w.worker_id))
            # Every attribute: a gang's constraints may name any of them ("team": "a"), and a
            # region that does not know one could never match it (it waited forever).
            attrs = dict(hosts[0].attributes)
            rows.append({"slice_id": sid,
                         "accelerator": hosts[0].attributes.get("accelerator_type") or None,
                         "hosts": [w.worker_id for w in hosts], "attributes": attrs})
        out[region] = (rows, sorted(busy.get(region, [])))
    return out
