"""When to take a checkpoint, what to call it, which old ones to prune. Pure: no I/O, no clock.

`decide(state, seq, now)` is read on every poll of the checkpoint thread: `seq` is the job
store's newest committed change (events.seq), `now` monotonic seconds. A checkpoint is due

    requested (a durable submit or an operator)        as soon as none is in flight
    >= after_changes commits since the last one        once min_gap_s has passed (a burst)
    any commit since the last one                      once interval_s has passed
    a failed attempt                                   retried after retry_s (GCS down)

so with steady traffic the newest checkpoint in the bucket is at most interval_s plus one
checkpoint's duration behind the disk: that is the loss bound (docs/architecture.md).

Names are UTC timestamps to the millisecond, `20261125T090415.123Z`: they sort by time as
strings, so "newest" is max() and a listing reads as a history. `prune` keeps the newest
`keep` plus the newest of each of the last `keep_days` UTC days (a rollback to yesterday
is what an operator reaches for), and never the newest one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime

NAME = re.compile(r"^\d{8}T\d{6}\.\d{3}Z$")


@dataclass(frozen=True)
class PolicyConfig:
    interval_s: float = 300.0
    """Checkpoint at least this often while anything changes: the loss bound's main term."""
    after_changes: int = 1000
    """A burst of this many commits triggers one early (1,000 submits ~ a few seconds)."""
    min_gap_s: float = 5.0
    """Bursts never checkpoint more often than this: one at 100,000 jobs took ~3 s here."""
    retry_s: float = 10.0
    """After a failed upload, try again this much later rather than hammer a sick GCS."""
    keep: int = 24
    """Newest checkpoints kept; 24 at the 5 min default is two hours of history."""
    keep_days: int = 7
    """Plus the newest checkpoint of each of this many UTC days, for rollbacks."""

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.min_gap_s < 0 or self.retry_s < 0:
            raise ValueError("interval_s must be > 0, min_gap_s and retry_s >= 0")
        if self.after_changes < 1 or self.keep < 1 or self.keep_days < 0:
            raise ValueError("after_changes and keep must be >= 1, keep_days >= 0")


@dataclass(frozen=True)
class PolicyState:
    taken_seq: int = -1  # store seq covered by the newest good checkpoint; -1: none yet
    taken_at: float | None = None  # monotonic start of the newest good one
    failed_at: float | None = None  # monotonic time of the last failure, None after success
    in_flight: bool = False
    requested: bool = False


def decide(state: PolicyState, config: PolicyConfig, seq: int, now: float) -> str | None:
    """Why a checkpoint should start now ("requested", "burst", "interval"), or None."""
    if state.in_flight:
        return None
    if state.failed_at is not None and now - state.failed_at < config.retry_s \
            and not state.requested:
        return None
    if state.requested:
        return "requested"
    changes = seq - state.taken_seq
    if changes <= 0:
        return None  # nothing new: an identical copy would only cost an upload
    since = float("inf") if state.taken_at is None else now - state.taken_at
    if changes >= config.after_changes and since >= config.min_gap_s:
        return "burst"
    if since >= config.interval_s:
        return "interval"
    return None


def started(state: PolicyState) -> PolicyState:
    return replace(state, in_flight=True, requested=False)


def finished(state: PolicyState, seq: int | None, started_at: float, now: float) -> PolicyState:
    """After a checkpoint: `seq` is what it covers, None if it failed."""
    if seq is None:
        return replace(state, in_flight=False, failed_at=now)
    return replace(state, in_flight=False, failed_at=None, taken_seq=seq, taken_at=started_at)


def name_for(wall: float) -> str:
    """The checkpoint name for a wall-clock time (seconds since the epoch)."""
    stamp = datetime.fromtimestamp(wall, UTC)
    return stamp.strftime("%Y%m%dT%H%M%S.") + f"{stamp.microsecond // 1000:03d}Z"


def time_of(name: str) -> float:
    """Seconds since the epoch that `name` stands for; ValueError if it is not a name."""
    if not NAME.match(name):
        raise ValueError(f"{name!r} is not a checkpoint name (like 20261125T090415.123Z)")
    return datetime.strptime(name[:-1], "%Y%m%dT%H%M%S.%f").replace(tzinfo=UTC).timestamp()


def to_prune(names: list[str], config: PolicyConfig) -> list[str]:
    """The checkpoints the retention rule drops, oldest first. Unparseable names are kept:
    something else wrote them, and deleting what we do not understand is not ours to do."""
    ours = sorted(n for n in names if NAME.match(n))
    keep = set(ours[-config.keep:])
    days: dict[str, str] = {}
    for name in ours:
        days[name[:8]] = name  # ascending, so the last write per day is its newest
    for day in sorted(days)[-config.keep_days:] if config.keep_days else []:
        keep.add(days[day])
    return [n for n in ours if n not in keep]
