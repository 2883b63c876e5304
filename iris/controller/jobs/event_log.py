"""The job kernel's events as stored rows, and replay: the same events through the same
kernel rebuild the same state. Pure: no SQLite here (the store keeps the rows, in the
transaction that commits the event's records), no clock (each row carries its `now`).

Only events that changed something are logged (those whose effects include a Persist): an
event that changed nothing replays as nothing. Two things are left out, both never read by
the kernel's decisions: a Submit's pickled entrypoint (stored once, in the jobs table) and
an AttemptExited's result bytes (stored in the results table; the log keeps only that
there was one, and replays it as b""). So `replay` rebuilds every record but those bytes;
`replayable` compares what it rebuilds.

The log stays bounded by folding: the store now and then (when the log passes
FOLD_AFTER_ROWS at the hourly prune, and whenever finished jobs are pruned) writes the
records as committed into a replay base and empties the log in the same transaction. So
`replay(rows, base=store.replay_base())` rebuilds the state exactly at any time; the log
holds the events since the last fold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any

import msgpack

from iris.base.errors import StorageError
from iris.controller.jobs import events as ev
from iris.controller.jobs import kernel
from iris.controller.jobs.spec import JobSpec
from iris.controller.jobs.state import KernelConfig, KernelState

_KINDS: dict[str, type] = {cls.__name__: cls for cls in (
    ev.Submit, ev.Assign, ev.AttemptBuilding, ev.AttemptRunning, ev.AttemptExited,
    ev.Preempted, ev.WorkerLost, ev.Kill, ev.Tick, ev.Reconcile, ev.Prune)}


# A Placement's fields, all scalars, in order: as a row without dataclasses.asdict's deep copy.
_PLACEMENT_FIELDS = tuple(f.name for f in fields(ev.Placement))


def encode(event: ev.Event) -> tuple[str, bytes]:
    """(kind, body) of one event, for the store."""
    kind = type(event).__name__
    if kind not in _KINDS:
        raise TypeError(f"not a job kernel event: {kind}")
    if isinstance(event, ev.Submit):
        data: dict[str, Any] = {"event_id": event.event_id, "spec": event.spec.to_dict()}
    elif isinstance(event, ev.Assign):
        data = {"event_id": event.event_id,
                "placements": [[getattr(p, n) for n in _PLACEMENT_FIELDS]
                               for p in event.placements]}
    else:
        data = {f.name: getattr(event, f.name) for f in fields(event)}
        if isinstance(event, ev.AttemptExited):
            data["result"] = None if event.result is None else b""
        if isinstance(event, ev.Reconcile):
            data["running"] = list(event.running)
    return kind, msgpack.packb(data, use_bin_type=True)


def decode(kind: str, body: bytes) -> ev.Event:
    try:
        data = msgpack.unpackb(body, raw=False)
        if kind == "Submit":
            return ev.Submit(data["event_id"], JobSpec.from_dict(data["spec"]))
        if kind == "Assign":
            return ev.Assign(data["event_id"],
                             tuple(ev.Placement(*p) for p in data["placements"]))
        if kind == "Reconcile":
            data["running"] = tuple(data["running"])
        return _KINDS[kind](**data)
    except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
        raise StorageError(f"event log: cannot read a {kind!r} row: {exc!r}") from exc


def changed_state(effects: Iterable[object]) -> bool:
    """Whether an event's effects committed anything (then it is logged)."""
    return any(isinstance(e, ev.Persist) for e in effects)


# 10,000 rows: a few MB of log, and a fold (which rewrites every live record) at most about
# once per 10,000 changes.
FOLD_AFTER_ROWS = 10_000


def replay(rows: Iterable[tuple[float, str, bytes]], config: KernelConfig | None = None,
           base: tuple[list, list, list] | None = None) -> KernelState:
    """The kernel state the logged events (at, kind, body), in order, lead to from `base`
    (jobs, tasks, attempts records: store.replay_base()), or from nothing."""
    state = KernelState.from_records(*base, config) if base else \
        KernelState(config=config or KernelConfig())
    for at, kind, body in rows:
        kernel.handle(state, decode(kind, body), at)
    return state


def replayable(state: KernelState) -> dict[str, Any]:
    """Every record of a state, as plain data, without the bytes the log leaves out."""
    return {
        "jobs": {k: (j.spec.to_dict(), j.to_dict(), sorted(j.children))
                 for k, j in sorted(state.jobs.items())},
        "tasks": {f"{k[0]}[{k[1]}]": t.to_dict() for k, t in sorted(state.tasks.items())},
        "attempts": {k: a.to_dict() for k, a in sorted(state.attempts.items())},
        "requests": dict(sorted(state.requests.items())),
        "pending": sorted(state.pending),
        "by_worker": {k: sorted(v) for k, v in sorted(state.by_worker.items()) if v},
    }
