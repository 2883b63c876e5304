"""Helpers shared by the job kernel and job store tests (no tests here).

A Harness drives the real kernel with generated event ids and a hand-moved `now`, the way the
controller actor will: read the time, handle the event, (optionally) commit the Persist.
"""

from __future__ import annotations

import itertools
from typing import Any

from iris.controller.jobs import events as ev
from iris.controller.jobs.kernel import handle
from iris.controller.jobs.model import (
    ACTIVE_ATTEMPT,
    TERMINAL_JOB,
    TERMINAL_TASK,
    TaskState,
    count_states,
    derive_job_state,
)
from iris.controller.jobs.spec import JobSpec, validate_submit
from iris.controller.jobs.state import KernelState

T0 = 1_700_000_000.0


def spec(name: str = "train", **raw: Any) -> JobSpec:
    parent = raw.pop("parent_spec", None)
    raw.setdefault("entrypoint", {"kind": "command", "argv": ["python", "train.py"]})
    if parent is None:
        raw.setdefault("user", "alice")
    else:
        raw["parent"] = parent.name
    return validate_submit({"name": name, **raw}, parent=parent)


def snapshot(state: KernelState) -> dict:
    """Everything observable about a kernel state, as plain comparable data."""
    return {
        "jobs": {k: (j.spec, j.to_dict(), sorted(j.children)) for k, j in state.jobs.items()},
        "tasks": {k: t.to_dict() for k, t in state.tasks.items()},
        "attempts": {k: a.to_dict() for k, a in state.attempts.items()},
        "requests": dict(state.requests),
        "pending": sorted(state.pending),
        "by_worker": {k: sorted(v) for k, v in state.by_worker.items()},
        "counts": {k: {s: n for s, n in j.counts.items() if n} for k, j in state.jobs.items()},
    }


def check_invariants(state: KernelState) -> None:
    """What must hold after every event, whatever happened."""
    for job_id, job in state.jobs.items():
        tasks = state.job_tasks(job_id)
        assert {s: n for s, n in job.counts.items() if n} == count_states(tasks), job_id
        assert job.state is derive_job_state(job, job.counts) or job.state in TERMINAL_JOB
        if job.state in TERMINAL_JOB:
            assert all(t.state in TERMINAL_TASK for t in tasks), job_id
    pending = {k for k, t in state.tasks.items() if t.state is TaskState.PENDING}
    assert set(state.pending) == pending
    held: dict[str, set[str]] = {}
    for task in state.tasks.values():
        attempt = state.attempts.get(task.attempt_id) if task.attempt_id else None
        if attempt is not None and attempt.state in ACTIVE_ATTEMPT:
            assert task.state is attempt.state, task
            held.setdefault(attempt.worker_id, set()).add(attempt.attempt_id)
        else:
            assert task.state not in ACTIVE_ATTEMPT, task
    assert held == state.by_worker


class Harness:
    """The kernel plus a clock and id counters; `store`, if given, commits every Persist."""

    def __init__(self, state: KernelState | None = None, store=None, now: float = T0):
        self.state = state or KernelState()
        self.store = store
        self.now = now
        self._ids = itertools.count()
        self.log: list[tuple[ev.Event, float]] = []

    def eid(self) -> str:
        return f"ev-{next(self._ids)}"

    def send(self, event: ev.Event) -> list[ev.Effect]:
        self.state, effects = handle(self.state, event, self.now)
        self.log.append((event, self.now))
        check_invariants(self.state)
        persists = [e for e in effects if isinstance(e, ev.Persist)]
        assert all(isinstance(e, ev.Persist) for e in effects[:len(persists)]), \
            "Persist must come first"
        if self.store is not None and persists:
            self.store.apply(persists)
        return effects

    def advance(self, seconds: float) -> None:
        self.now += seconds

    # -- event shorthands ------------------------------------------------------------------
    def submit(self, s: JobSpec) -> str:
        accepted = [e for e in self.send(ev.Submit(self.eid(), s)) if isinstance(e, ev.Accepted)]
        return accepted[0].job_id

    def assign(self, job_id: str, index: int, worker: str = "w1",
               attempt: str | None = None) -> str:
        attempt = attempt or f"att-{next(self._ids)}"
        self.send(ev.Assign(self.eid(), (ev.Placement(job_id, index, worker, attempt),)))
        return attempt

    def run(self, job_id: str, index: int = 0, worker: str = "w1") -> str:
        attempt = self.assign(job_id, index, worker)
        self.send(ev.AttemptRunning(self.eid(), attempt))
        return attempt

    def exit(self, attempt: str, code: int = 0, result: bytes | None = None,
             error: str = "") -> list[ev.Effect]:
        return self.send(ev.AttemptExited(self.eid(), attempt, code, error, result))

    def task(self, job_id: str, index: int = 0):
        return self.state.tasks[(job_id, index)]

    def task_state(self, job_id: str, index: int = 0) -> TaskState:
        return self.state.tasks[(job_id, index)].state

    def job_state(self, job_id: str):
        return self.state.jobs[job_id].state


def of(effects: list[ev.Effect], kind: type) -> list:
    return [e for e in effects if isinstance(e, kind)]
