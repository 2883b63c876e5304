"""Per-user and per-group budgets: accelerator-hours over a rolling window, and a priority cap.

Pure: budgets and attempts in, usage, demotions and verdicts out; no I/O, `now` passed in.
Not where budgets are stored (jobs/store.py) or served (budget_book.py).

- A budget names a user ("alice") or a group ("group:ml", with its `members`). Set by an
  operator; `hours` None means no limit on hours, `max_priority` None no cap on the band.
- Usage is accelerator-hours: for each attempt, chips (or GPUs) on its host times the part
  of its run time (started -> finished, or now) inside the window. Attempts are in the job
  store, so usage survives a controller restart; finished jobs are pruned after the
  controller's retention (7 days by default), so a window may not be longer than that.
- Over budget (usage >= hours, for the user or any group they are in): the scheduler
  places the user's pending work as batch and says why in its pending reason. Work already
  running is not stopped or demoted (it was placed while within budget).
- The cap: a submission above the most restrictive `max_priority` of the user and their
  groups is refused at submit, naming the cap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from iris.base.errors import InvalidRequestError
from iris.base.ids import validate_component
from iris.wire.states import PRIORITIES

DAY_S = 86_400.0
DEFAULT_WINDOW_S = 7 * DAY_S
"""A week: long enough to smooth a weekend of idle, short enough that overspending one
week is forgiven the next (what the team's old per-user TPU sheet used)."""

GROUP_PREFIX = "group:"
_BANDS = {name: i for i, name in enumerate(PRIORITIES)}  # production=0 ... batch=2


@dataclass(frozen=True)
class Budget:
    subject: str                      # "alice" or "group:ml"
    hours: float | None = None        # accelerator-hours per window; None = unlimited
    window_s: float = DEFAULT_WINDOW_S
    max_priority: str | None = None   # highest band its jobs may ask for; None = any
    members: tuple[str, ...] = ()     # a group's users

    @property
    def is_group(self) -> bool:
        return self.subject.startswith(GROUP_PREFIX)

    def to_dict(self) -> dict:
        return {**asdict(self), "members": list(self.members)}

    @classmethod
    def from_dict(cls, data: Mapping) -> Budget:
        return cls(**{**data, "members": tuple(data.get("members", ()))})


def parse_budget(raw: object, max_window_s: float) -> Budget:
    """A Budget from an operator's request, or InvalidRequestError naming the bad field."""
    if not isinstance(raw, Mapping):
        raise InvalidRequestError(f"budget: expected a mapping, got {raw!r}", "budget")
    unknown = sorted(set(raw) - {"subject", "hours", "window_s", "max_priority", "members"})
    if unknown:
        raise InvalidRequestError(f"budget.{unknown[0]}: unknown field", unknown[0])
    subject = parse_subject(raw.get("subject"))
    hours = raw.get("hours")
    if hours is not None and (isinstance(hours, bool) or not isinstance(hours, int | float)
                              or not math.isfinite(hours) or hours < 0):
        raise InvalidRequestError(f"hours: expected accelerator-hours >= 0, got {hours!r}",
                                  "hours")
    window = raw.get("window_s", DEFAULT_WINDOW_S)
    if isinstance(window, bool) or not isinstance(window, int | float) or not (
            0 < window <= max_window_s):
        raise InvalidRequestError(
            f"window_s: expected seconds in (0, {max_window_s:g}] (usage is counted from the "
            f"job store, which keeps finished jobs {max_window_s / DAY_S:g} days), got "
            f"{window!r}", "window_s")
    cap = raw.get("max_priority")
    if cap is not None and cap not in PRIORITIES:
        raise InvalidRequestError(f"max_priority: expected one of {', '.join(PRIORITIES)}, "
                                  f"got {cap!r}", "max_priority")
    members = raw.get("members") or ()
    if isinstance(members, str) or not isinstance(members, Iterable):
        raise InvalidRequestError(f"members: expected a list of users, got {members!r}",
                                  "members")
    members = tuple(sorted({_user(m, "members") for m in members}))
    if members and not subject.startswith(GROUP_PREFIX):
        raise InvalidRequestError(f"members: only a group ({GROUP_PREFIX}NAME) has members, "
                                  f"not user {subject!r}", "members")
    return Budget(subject, None if hours is None else float(hours), float(window), cap, members)


def parse_subject(value: object) -> str:
    if isinstance(value, str) and value.startswith(GROUP_PREFIX):
        return GROUP_PREFIX + _user(value[len(GROUP_PREFIX):], "subject")
    return _user(value, "subject")


def _user(value: object, field: str) -> str:
    try:
        return validate_component(value, field)
    except (ValueError, TypeError) as exc:
        raise InvalidRequestError(f"{field}: {exc}", field) from exc


@dataclass(frozen=True, slots=True)
class Run:
    """One attempt's accelerator use: who, how many chips, from when to when (None: still
    running). Wall-clock seconds."""

    user: str
    chips: int
    started_at: float
    finished_at: float | None


def usage(runs: Iterable[Run], now: float, window_s: float) -> dict[str, float]:
    """user -> accelerator-hours inside [now - window_s, now]."""
    start = now - window_s
    out: dict[str, float] = {}
    for r in runs:
        if not r.chips:
            continue
        end = now if r.finished_at is None else min(r.finished_at, now)
        seconds = end - max(r.started_at, start)
        if seconds > 0:
            out[r.user] = out.get(r.user, 0.0) + r.chips * seconds / 3600.0
    return out


def groups_of(budgets: Mapping[str, Budget], user: str) -> list[Budget]:
    return [b for b in budgets.values() if b.is_group and user in b.members]


def over_budget(budgets: Mapping[str, Budget],
                used: Mapping[float, Mapping[str, float]]) -> dict[str, str]:
    """user -> why they are over budget ("alice is over budget (812 of 800 accelerator-hours
    in 7 days)"). `used`: window -> user -> hours (from `usage`)."""
    out: dict[str, str] = {}
    for b in sorted(budgets.values(), key=lambda b: (b.is_group, b.subject)):
        if b.hours is None:
            continue
        per_user = used.get(b.window_s, {})
        if not b.is_group:
            spent = per_user.get(b.subject, 0.0)
            if spent >= b.hours:
                out.setdefault(b.subject, f"{b.subject} is over budget "
                                          f"({_said(spent, b)})")
            continue
        spent = sum(per_user.get(m, 0.0) for m in b.members)
        if spent >= b.hours:
            for m in b.members:
                out.setdefault(m, f"{m}'s {b.subject} is over budget ({_said(spent, b)})")
    return out


def _said(spent: float, b: Budget) -> str:
    days = b.window_s / DAY_S
    window = f"{days:g} days" if days >= 1 else f"{b.window_s / 3600:g} hours"
    return f"{spent:.0f} of {b.hours:g} accelerator-hours in {window}"


def priority_cap(budgets: Mapping[str, Budget], user: str) -> tuple[str, str] | None:
    """(the highest band `user` may submit at, the budget that sets it), or None."""
    caps = [(b.max_priority, b.subject) for b in [budgets.get(user), *groups_of(budgets, user)]
            if b is not None and b.max_priority is not None]
    if not caps:
        return None
    return max(caps, key=lambda c: _BANDS[c[0]])  # batch (2) is more restrictive


def check_priority(budgets: Mapping[str, Budget], user: str, priority: str) -> None:
    """InvalidRequestError if `priority` is above `user`'s cap (nothing is changed)."""
    cap = priority_cap(budgets, user)
    if cap is not None and _BANDS[priority] < _BANDS[cap[0]]:
        who = f"user {user}" if cap[1] == user else f"{cap[1]} (user {user} is a member)"
        raise InvalidRequestError(
            f"priority: {priority} is above the cap for {who}: at most {cap[0]} (set by an "
            f"operator: iris user budget get {cap[1]})", "priority")
