"""Checking an inventory delta against a region's ledger before any of it is applied. Pure.

Not the applying (ReservationLedger.apply_delta) nor the wire checks (wire/control.py
RegionDelta checks types and bounds). This checks what only the ledger can: slices named
for removal exist, no host ends up in two slices, busy and free hosts are in the inventory
the delta leaves. The first problem is named; a delta with any is applied not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


def problem(region: str, slices_now: Mapping[str, Any], host_slice: Mapping[str, str],
            slices: list, removed: list[str], busy: list[str], free: list[str],
            present: Mapping[str, Any] = MappingProxyType({})) -> str | None:
    """What is wrong with this delta (slices: SliceSpec-like, added or replaced), or None.
    `present`: more named lists of hosts that must be in the inventory it leaves. O(the
    slices and hosts named)."""
    where = f"region {region!r}"
    for sid in removed:
        if sid not in slices_now:
            return f"removed: no slice {sid!r} in {where}"
    if len(set(removed)) != len(removed):
        return "removed: a slice is listed twice"
    replaced = set(removed)
    incoming: dict[str, str] = {}
    for spec in slices:
        if spec.slice_id in replaced:
            return f"slices: slice {spec.slice_id!r} is listed twice (or removed and added)"
        if not spec.hosts:
            return f"slices: slice {spec.slice_id!r} has no hosts"
        replaced.add(spec.slice_id)
        for h in spec.hosts:
            if h in incoming:
                return (f"slices: host {h!r} is in two slices ({incoming[h]!r} and "
                        f"{spec.slice_id!r})")
            incoming[h] = spec.slice_id
    for h, sid in incoming.items():
        other = host_slice.get(h)
        if other is not None and other not in replaced:
            return f"slices: host {h!r} of slice {sid!r} is already in slice {other!r} of {where}"
    both = set(busy) & set(free)
    if both:
        return f"busy: host {min(both)!r} is listed both busy and free"
    for name, hosts in (("busy", busy), ("free", free), *present.items()):
        for h in hosts:
            if h not in incoming and host_slice.get(h) in (None, *replaced):
                return f"{name}: host {h!r} is in no slice of {where}"
    return None
