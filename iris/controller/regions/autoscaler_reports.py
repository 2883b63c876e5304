"""What the autoscaler kernel reports: which accelerators are on their way here, which it
holds back and why (the global demand router reads both), and the dashboard's capacity page.

A mixin of the Autoscaler kernel (autoscaler.py): it reads the kernel's slices, holds,
backoffs and decision log, and changes nothing. Pure, like the kernel.
"""

from __future__ import annotations

from iris.controller.config import ScaleGroupConfig
from iris.controller.regions.group_shapes import accelerator_keys


class AutoscalerReports:
    """Autoscaler's read-only views (see the module docstring)."""

    def scaling_up(self, now: float) -> dict[str, list[str]]:
        """Accelerator (see accelerator_keys) -> [region] while a slice of it is on its way."""
        out: dict[str, list[str]] = {}
        for t in self._slices.values():
            if self._coming(t):
                for key in accelerator_keys(self._groups[t.group]):
                    out[key] = [self.region]
        return out

    def blocked(self, now: float) -> dict[str, str]:
        """Accelerator -> why slices of it cannot be had here now: held back at the last
        decide, or, demand or not, every zone backing off or the group cooling down.

        The standing holds matter to the global router (demand.route), which sends work
        to the first region not blocked: reporting a hold only while this region is asked
        made the demand flap back as soon as it moved away (the asking region saw no hold
        once unasked), so it never reached a third region. bench.daytrace, default day:
        useful chip-hours 48% -> 86% of the upper bound (bench/RESULTS.md).

        A name several groups go by (the TPU family single-host tasks pack onto, e.g.
        "v5litepod" for the v5e-4, v5e-16, v5e-64 groups) is blocked only while EVERY one of
        them holds back: a stocked-out v5e-64 group once blocked "v5litepod" for the whole
        region, so single-host TPU work, which a v5e-4 group would have grown for, was
        routed nowhere (bench.daytrace: 22 of 34 idle quota chips, mean over the day)."""
        out: dict[str, list[str]] = {}
        carriers: dict[str, int] = {}
        for name, g in self._groups.items():
            keys = accelerator_keys(g)
            for key in keys:
                carriers[key] = carriers.get(key, 0) + 1
            hold = self._held.get(name) or self._standing_hold(g, now)
            if hold is None:
                continue
            text = self._hold_text(g, hold, now)
            for key in keys:
                out.setdefault(key, []).append(f"group {name}: {text}")
        return {k: "; ".join(v) for k, v in out.items() if len(v) == carriers[k]}

    def _hold_text(self, g: ScaleGroupConfig, hold: str, now: float) -> str:
        if hold == "cooldown":
            return (f"churn cooldown for {self._cooldown[g.name] - now:.0f} s more "
                    "(slices were preempted young)")
        if hold == "max":
            return f"at max_slices {g.max_slices}"
        parts = []
        for zone in g.zones:
            b = self._backoff.get((g.name, zone))
            if b is not None:
                parts.append(f"zone {zone} {b.reason} (retry in {max(0, b.until - now):.0f} s)")
        return ", ".join(parts)

    def status(self, now: float) -> dict:
        """The dashboard capacity page's data; decision times are absolute monotonic
        seconds ("at") and seconds ago ("ago_s")."""
        groups = []
        for g in self._groups.values():
            slices = [{"slice_id": s, "zone": t.zone, "state": t.state.value,
                       "deleting": t.deleting, "hosts": self._host_count(t),
                       "registered": t.usage.registered, "busy": t.usage.busy,
                       "age_s": now - t.born, "detail": t.detail, "draining": t.draining}
                      for s, t in sorted(self._slices.items()) if t.group == g.name]
            backoff = {z: {"until_s": b.until - now, "reason": b.reason}
                       for (name, z), b in self._backoff.items() if name == g.name and b.until > now}
            groups.append({"group": g.name, "provider": g.provider,
                           "accelerator": accelerator_keys(g)[0],
                           "min": g.min_slices, "max": g.max_slices, "buffer": g.buffer_slices,
                           "priority": g.priority, "slices": slices, "backoff": backoff,
                           "cooldown_s": max(0.0, self._cooldown.get(g.name, now) - now),
                           "held": self._hold_text(g, self._held[g.name], now)
                           if g.name in self._held else ""})
        decisions = [{**d, "ago_s": now - d["at"]} for d in self._log]
        return {"region": self.region, "groups": groups, "decisions": decisions,
                "time": "decisions[].at is absolute monotonic seconds; ago_s = now - at"}
