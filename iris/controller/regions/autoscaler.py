"""The autoscaler kernel: slices to create or delete per scale group. Pure: no threads, no clock.

Not the provider calls (scaler.py runs these decisions against a Provider) and not placement;
its configuration, inputs and decisions are declared in scaling_model.py.
Each `decide(now, slices, usage, unmet)` reads the provider's view of the slices, what the
controller knows of their hosts, and how many more slices pending work needs, and returns
Create / Delete decisions. Rules:

- PREEMPTED / FAILED slices are deleted at once; one that died younger than `churn_window_s`
  counts as churn, and `churn_limit` of those within that window hold every create of the
  group (min_slices too) for `churn_cooldown_s`.
- A slice that stays CREATING (or READY with hosts that never register) past
  `boot_timeout_s` is deleted and its zone backs off; so does a zone whose create failed.
- A READY slice whose hosts had all registered and that lost one for `host_lost_grace_s` is
  deleted whole (slice atomicity: a TPU slice missing a host cannot run its gang).
- Unmet demand that persists `scale_up_delay_s` creates slices, into the group's zones in
  config order, skipping zones in backoff. Groups offering the same host shape are
  alternatives for the same demand: the one of highest `priority` is grown first.
- A READY slice the provider says is draining (a Slurm node drained, an allocation near its
  time limit) is retired: Delete with cause "drain", which the region carries out once the
  slice's hosts run nothing; demand it leaves unmet grows a replacement meanwhile.
- Never more than `max_slices` alive (CREATING counted), never a voluntary delete below
  `min_slices`, `buffer_slices` idle slices kept warm; idle slices older than
  `scale_down_delay_s` idle are deleted, oldest idle first, and never a busy one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence

from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import SliceInfo, SliceState
from iris.controller.regions.group_shapes import accelerator_keys, pool_key
from iris.controller.regions.scaling_model import (
    AutoscalerConfig,
    Backoff,
    Create,
    Delete,
    SliceUsage,
    TrackedSlice,
)

_ID = "abcdefghijklmnopqrstuvwxyz0123456789-"
_DEAD = (SliceState.PREEMPTED, SliceState.FAILED)
# Importers name the vocabulary through this module too (the kernel and its words).
__all__ = ["Autoscaler", "AutoscalerConfig", "Create", "Delete", "SliceUsage"]


class Autoscaler:
    """One region's scaling state and its reports; see the module docstring for the rules."""

    def __init__(self, region: str, groups: Sequence[ScaleGroupConfig],
                 config: AutoscalerConfig | None = None, *, id_prefix: str):
        if not id_prefix or not id_prefix[0].isalpha() or set(id_prefix) - set(_ID) or len(
                id_prefix) > 40:
            raise ValueError(f"id_prefix {id_prefix!r}: use lowercase letters, digits and '-', "
                             "start with a letter, at most 40 characters")
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise ValueError(f"scale group names must be unique, got {names}")
        self.region = region
        self.config = config or AutoscalerConfig()
        self._prefix = id_prefix
        self._groups = {g.name: g for g in groups}
        order = sorted(groups, key=lambda g: -g.priority)  # stable: config order breaks ties
        self._pools: dict[tuple, list[ScaleGroupConfig]] = {}
        for g in order:
            self._pools.setdefault(pool_key(g), []).append(g)
        self._slices: dict[str, TrackedSlice] = {}
        self._backoff: dict[tuple[str, str], Backoff] = {}
        self._churn: dict[str, list[float]] = {g: [] for g in self._groups}
        self._cooldown: dict[str, float] = {}
        self._demand_since: dict[tuple, float] = {}
        self._held: dict[str, str] = {}  # group -> "max" | "cooldown" | "zones"
        self._seq = 0
        self._now = -math.inf  # of the decide running: predicates read it
        self._log: deque[dict] = deque(maxlen=self.config.log_size)

    # ---- the decision --------------------------------------------------------------

    def decide(self, now: float, slices: Sequence[SliceInfo], usage: Mapping[str, SliceUsage],
               unmet: Mapping[str, int]) -> list[Create | Delete]:
        """slices: the provider's view; usage: slice_id -> SliceUsage; unmet: group name ->
        MORE slices the pending work needs now (0/absent = none)."""
        for name, n in unmet.items():
            if name not in self._groups:
                raise ValueError(f"unmet: no scale group {name!r} in region {self.region}")
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"unmet[{name!r}]: expected an int >= 0, got {n!r}")
        self._now = now
        self._observe(now, slices, usage)
        out: list[Create | Delete] = self._lifecycle(now)
        self._held = {}
        for pool in self._pools.values():
            demand = max(unmet.get(g.name, 0) for g in pool)
            out += self._scale_up(now, pool, demand)
            if demand == 0:
                for g in pool:
                    out += self._scale_down(now, g)
        return out

    def create_failed(self, group: str, zone: str, error: str, capacity: bool, now: float,
                      *, slice_id: str | None = None) -> None:
        """A create did not happen. Its zone backs off (doubling); `capacity`: stock-out or
        quota, else another refusal. Without `slice_id` the oldest pending create there."""
        if group not in self._groups:
            raise ValueError(f"create_failed: no scale group {group!r}")
        if slice_id is None:
            pending = [s for s, t in self._slices.items()
                       if t.group == group and t.zone == zone and not t.adopted
                       and t.state is SliceState.CREATING]
            slice_id = pending[0] if pending else None
        self._slices.pop(slice_id, None)
        what = "stocked out / quota" if capacity else "create failed"
        self._back_off(group, zone, f"{what}: {error}", now)
        self._record(now, "create_failed", group, slice_id or "", zone, error)

    def delete_failed(self, slice_id: str, error: str, now: float) -> None:
        """A delete did not happen: decide again after backoff_initial_s (not every tick: a
        provider refusing deletes must not be hammered), when the slice may be wanted again."""
        t = self._slices.get(slice_id)
        if t is not None:
            t.deleting, t.retry_delete_at = False, now + self.config.backoff_initial_s
            self._record(now, "delete_failed", t.group, slice_id, t.zone, error)

    # ---- observing -------------------------------------------------------------------

    def _observe(self, now: float, slices: Sequence[SliceInfo],
                 usage: Mapping[str, SliceUsage]) -> None:
        seen = set()
        for info in slices:
            if info.group not in self._groups or info.state is SliceState.NOT_FOUND:
                continue  # another region's, or an old config's: not ours to manage
            seen.add(info.slice_id)
            t = self._slices.get(info.slice_id)
            if t is None:
                t = self._slices[info.slice_id] = TrackedSlice(info.group, info.zone, now,
                                                           adopted=True)
            t.listed, t.state, t.zone = True, info.state, info.zone
            t.detail, t.draining = info.detail, info.draining
            t.hosts = tuple(h.host_id for h in info.hosts) or t.hosts
            t.usage = usage.get(info.slice_id, SliceUsage(0, 0))
            if info.state is SliceState.READY:
                self._observe_ready(now, t)
            else:
                t.idle_since = None
        for sid in [s for s, t in self._slices.items() if t.listed and s not in seen]:
            del self._slices[sid]  # deleted, by us or by someone else

    def _observe_ready(self, now: float, t: TrackedSlice) -> None:
        n = self._host_count(t)
        if self._full(t):
            if not t.ever_full:
                t.ever_full, t.full_at = True, now
                b = self._backoff.get((t.group, t.zone))
                if b is not None:
                    b.delay = 0.0  # the zone delivered: the next failure starts small again
            t.lost_since = None
        elif t.ever_full and t.lost_since is None and t.usage.registered < n:
            t.lost_since = now
        if t.usage.busy > 0:
            t.idle_since, t.ever_busy = None, True
        elif t.idle_since is None:
            t.idle_since = now

    def _lifecycle(self, now: float) -> list[Delete]:
        out = []
        cfg = self.config
        for sid, t in self._slices.items():
            if t.deleting or t.retry_delete_at > now:
                continue
            age = now - t.born
            if t.state in _DEAD:
                cause = t.state.value.lower()
                if not t.adopted and age < cfg.churn_window_s:
                    self._count_churn(now, t.group)
                out.append(self._delete(now, sid, t, cause, f"{cause} at age {age:.0f} s"))
            elif not self._full(t) and not t.ever_full and age >= cfg.boot_timeout_s:
                self._back_off(t.group, t.zone, f"a slice did not boot in {age:.0f} s", now)
                out.append(self._delete(now, sid, t, "boot_timeout", self._boot_text(t, age)))
            elif t.lost_since is not None and now - t.lost_since >= cfg.host_lost_grace_s:
                out.append(self._delete(now, sid, t, "lost_host", self._lost_text(t)))
            elif t.draining and t.state is SliceState.READY:
                # Its running work finishes first: the region drains, then deletes it.
                out.append(self._delete(now, sid, t, "drain", f"retired: {t.draining}"))
        return out

    # ---- growing and shrinking -------------------------------------------------------

    def _scale_up(self, now: float, pool: list[ScaleGroupConfig], demand: int) -> list[Create]:
        left, spare = demand, {}
        for g in pool:  # slices on their way, or just arrived, absorb demand first
            absorbed = min(self._count(g, self._absorbs), left)
            left -= absorbed
            spare[g.name] = self._count(g, self._spare) - absorbed
        key = pool_key(pool[0])
        if demand > 0:  # the demand itself, not what is left of it: a replacement is not new
            since = self._demand_since.setdefault(key, now)
            if now - since < self.config.scale_up_delay_s:
                left = 0  # not yet: let the demand prove it persists
        else:
            self._demand_since.pop(key, None)
        out: list[Create] = []
        holds = []
        for g in pool:
            alive = self._count(g, self._alive)
            own = max(g.min_slices - alive, g.buffer_slices - spare[g.name], 0)
            want = own + left
            if want <= 0:
                continue
            n = min(want, g.max_slices - alive)
            hold = self._hold(g, now, n)
            if hold:
                holds.append((g.name, hold, own))
                continue
            if n < want:
                holds.append((g.name, "max", own))
            why = (f"pending work needs {demand} more slice(s)" if left else
                   f"below min_slices {g.min_slices}" if alive < g.min_slices else
                   f"keeping {g.buffer_slices} idle slice(s) warm")
            left -= min(left, max(0, n - own))
            zone = self._open_zone(g, now)
            out += [self._create(now, g, zone, why) for _ in range(n)]
        for name, hold, own in holds:
            if own or left:
                self._held[name] = hold
        return out

    def _standing_hold(self, g: ScaleGroupConfig, now: float) -> str | None:
        if self._cooldown.get(g.name, -math.inf) > now:
            return "cooldown"
        return "zones" if self._open_zone(g, now) is None else None

    def _hold(self, g: ScaleGroupConfig, now: float, n: int) -> str | None:
        """Why `g` cannot create now: cooldown, every zone backing off, at max; or None."""
        if self._cooldown.get(g.name, -math.inf) > now:
            return "cooldown"
        if self._open_zone(g, now) is None:
            return "zones"
        return "max" if n <= 0 else None

    def _scale_down(self, now: float, g: ScaleGroupConfig) -> list[Delete]:
        mine = [(s, t) for s, t in self._slices.items() if t.group == g.name]
        idle = [(s, t) for s, t in mine if self._idle(t)]
        spare = sum(1 for _, t in mine if self._spare(t))
        n = min(self._count(g, self._alive) - g.min_slices, spare - g.buffer_slices)
        expired = sorted((t.idle_since, s) for s, t in idle if t.retry_delete_at <= now
                         and now - t.idle_since >= self.config.scale_down_delay_s)
        return [self._delete(now, s, self._slices[s], "idle", f"idle {now - since:.0f} s")
                for since, s in expired[:max(0, n)]]

    # ---- effects ------------------------------------------------------------------------

    def _create(self, now: float, g: ScaleGroupConfig, zone: str, why: str) -> Create:
        self._seq += 1
        suffix = f"-{self._seq}"
        slice_id = f"{self._prefix}-{g.name}"[:63 - len(suffix)].rstrip("-") + suffix
        self._slices[slice_id] = TrackedSlice(g.name, zone, now)
        self._record(now, "create", g.name, slice_id, zone, why)
        return Create(g.name, zone, slice_id, why)

    def _delete(self, now: float, sid: str, t: TrackedSlice, cause: str, reason: str) -> Delete:
        t.deleting = True
        self._record(now, "delete", t.group, sid, t.zone, reason)
        return Delete(sid, t.group, reason, cause, t.hosts)

    def _back_off(self, group: str, zone: str, reason: str, now: float) -> None:
        b = self._backoff.get((group, zone))
        if b is not None and b.until > now:
            b.reason = reason  # failures of one batch of creates double the delay once
            return
        delay = self.config.backoff_initial_s if b is None or b.delay == 0 else min(
            b.delay * 2, self.config.backoff_max_s)
        self._backoff[(group, zone)] = Backoff(now + delay, delay, reason)

    def _count_churn(self, now: float, group: str) -> None:
        events = [e for e in self._churn[group] if now - e < self.config.churn_window_s]
        events.append(now)
        if len(events) >= self.config.churn_limit:
            self._cooldown[group] = now + self.config.churn_cooldown_s
            self._record(now, "cooldown", group, "", "",
                         f"{len(events)} slices preempted young within "
                         f"{self.config.churn_window_s:.0f} s")
            events = []
        self._churn[group] = events

    def _record(self, now: float, action: str, group: str, slice_id: str, zone: str,
                reason: str) -> None:
        self._log.append({"at": now, "action": action, "group": group, "slice_id": slice_id,
                          "zone": zone, "reason": reason})

    # ---- predicates -------------------------------------------------------------------

    def _host_count(self, t: TrackedSlice) -> int:
        return len(t.hosts) or self._groups[t.group].hosts_per_slice

    def _full(self, t: TrackedSlice) -> bool:
        if t.state is not SliceState.READY:
            return False
        return not self.config.hosts_register or t.usage.registered >= self._host_count(t)

    def _alive(self, t: TrackedSlice) -> bool:
        return not t.deleting and t.state in (SliceState.CREATING, SliceState.READY)

    def _coming(self, t: TrackedSlice) -> bool:
        """On its way: booting, or READY with hosts still registering."""
        return self._alive(t) and not t.ever_full and not self._full(t)

    def _absorbs(self, t: TrackedSlice) -> bool:
        """Counts against demand: on its way, or up for less than scale_up_delay_s and never
        busy yet (the demand reported may predate its workers registering)."""
        return self._coming(t) or (self._idle(t) and not t.ever_busy and
                                   self._now - t.full_at < self.config.scale_up_delay_s)

    def _spare(self, t: TrackedSlice) -> bool:
        return self._coming(t) or self._idle(t)

    def _idle(self, t: TrackedSlice) -> bool:
        return self._alive(t) and t.ever_full and t.lost_since is None and t.idle_since is not None

    def _count(self, g: ScaleGroupConfig, pred) -> int:
        return sum(1 for t in self._slices.values() if t.group == g.name and pred(t))

    def _open_zone(self, g: ScaleGroupConfig, now: float) -> str | None:
        for zone in g.zones:
            b = self._backoff.get((g.name, zone))
            if b is None or b.until <= now:
                return zone
        return None

    def _boot_text(self, t: TrackedSlice, age: float) -> str:
        if t.state is SliceState.CREATING:
            return f"boot timeout: still CREATING after {age:.0f} s"
        return (f"boot timeout: {t.usage.registered} of {self._host_count(t)} hosts "
                f"registered after {age:.0f} s")

    def _lost_text(self, t: TrackedSlice) -> str:
        missing = [h for h in t.hosts if h not in t.usage.registered_hosts]
        if t.usage.registered_hosts and missing:
            return f"lost host {', '.join(missing)}"
        return f"lost host ({t.usage.registered} of {self._host_count(t)} registered)"

    # ---- reports: which accelerators are on their way, which are held back and why (the
    # global demand router reads both), and the dashboard's capacity page. Change nothing.

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
