"""The capacity page's data, shaped from the controller snapshot's "capacity" key. No I/O.

Not the autoscaler (iris.controller): it publishes one entry per region with its scale
groups, their slices, zone backoffs and its recent decisions; this module only counts and
orders them for the page and /metrics. A snapshot without the key, or with no region in it,
comes from a controller that runs no autoscaler (or whose regions have not reported yet),
and the view says so instead of showing empty groups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SLICE_STATES = ("READY", "CREATING", "PREEMPTED", "FAILED", "DELETING")
"""Every state a slice can be reported in; each group counts all of them (0 included)."""
_COUNT_NAMES = {"READY": "ready", "CREATING": "booting", "PREEMPTED": "preempted",
                "FAILED": "failed", "DELETING": "deleting"}
NO_AUTOSCALER = ("This cluster has no autoscaler: its capacity is the workers that have "
                 "registered (see Workers), and no machines are added or removed on demand. "
                 "To autoscale, give the controller a cluster config with scale groups "
                 "(iris controller serve --config cluster.yaml).")
NOT_REPORTED = ("The cluster config has the scale groups below, but no autoscaler has reported "
                "on them yet; their slices show here once their regions report.")
"""One message each: the page shows it as the whole empty state (it used to add a second
sentence of its own on top, and the two said the same thing)."""


def slice_counts(group: Mapping[str, Any]) -> dict[str, int]:
    """Slices of one group by state, keyed by SLICE_STATES; unknown states under their own."""
    counts = dict.fromkeys(SLICE_STATES, 0)
    for s in group.get("slices", ()):
        state = str(s.get("state", "UNKNOWN"))
        counts[state] = counts.get(state, 0) + 1
    return counts


def capacity_view(snapshot: Mapping[str, Any], scale_groups: list[dict] | None) -> dict:
    """The /api/capacity body. `scale_groups`: the cluster config's, shown when configured."""
    regions = snapshot.get("capacity")
    if not regions:
        note = NOT_REPORTED if scale_groups is not None else NO_AUTOSCALER
        return {"autoscaler": False, "note": note, "regions": [],
                "scale_groups": scale_groups, "configured": scale_groups is not None,
                "at": snapshot.get("at")}
    return {"autoscaler": True, "note": "", "at": snapshot.get("at"),
            "scale_groups": scale_groups, "configured": scale_groups is not None,
            "regions": [_region(r, snapshot.get("at")) for r in regions]}


def _region(region: Mapping[str, Any], at: float | None) -> dict:
    groups = []
    for g in region.get("groups", ()):
        counts = slice_counts(g)
        groups.append({**g, "counts": {_COUNT_NAMES.get(k, k.lower()): n
                                       for k, n in counts.items()}})
    decisions = [{**d, "ago_s": _ago(d, at)} for d in region.get("decisions", ())]
    decisions.reverse()  # the snapshot lists newest last; a person reads newest first
    return {"region": region.get("region", "?"), "groups": groups, "decisions": decisions}


def _ago(decision: Mapping[str, Any], at: float | None) -> float | None:
    """Seconds before the snapshot: given by the region, or from wall-clock `at` times."""
    if decision.get("ago_s") is not None:
        return round(float(decision["ago_s"]), 1)
    if at is None or decision.get("at") is None:
        return None
    return round(max(0.0, float(at) - float(decision["at"])), 1)
