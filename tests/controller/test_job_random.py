"""Random event sequences against the job kernel: after every event the invariants hold (the
Harness checks them), a refused event changes nothing, replay is exact, and what was committed
reloads equal."""

from __future__ import annotations

import itertools
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.base.errors import ConflictError, InvalidRequestError, NotFoundError
from iris.controller.jobs import events as ev
from iris.controller.jobs.kernel import handle
from iris.controller.jobs.model import TERMINAL_JOB, TaskState
from iris.controller.jobs.state import KernelState
from iris.controller.jobs.store import JobStore
from tests.controller.test_job_support import Harness, check_invariants, snapshot, spec

_WORKERS = ("w0", "w1", "w2")
_NAMES = ("a", "b", "c")


def _random_spec(data, h: Harness):
    live = sorted(j for j, job in h.state.jobs.items() if job.state not in TERMINAL_JOB)
    parent = data.draw(st.sampled_from([None, *live]))
    kw = dict(
        replicas=data.draw(st.integers(1, 3)),
        max_retries_failure=data.draw(st.integers(0, 2)),
        max_retries_preemption=data.draw(st.integers(0, 2)),
        max_task_failures=data.draw(st.integers(0, 1)),
        timeout_s=data.draw(st.sampled_from([None, 50.0])),
        scheduling_timeout_s=data.draw(st.sampled_from([None, 80.0])),
        request_id=data.draw(st.sampled_from([None, "r1", "r2"])),
    )
    if data.draw(st.booleans()):
        kw["resources"] = {"tpu": "v5litepod-16"}
    if parent is not None:
        kw["parent_spec"] = h.state.jobs[parent].spec
    return spec(data.draw(st.sampled_from(_NAMES)), **kw)


def _random_event(data, h: Harness, ids) -> ev.Event:
    kind = data.draw(st.sampled_from(
        ["submit", "assign", "assign", "building", "running", "running", "exit", "exit",
         "preempt", "lost", "kill", "tick", "reconcile", "prune"]))
    attempts = sorted(h.state.attempts) or ["att-none"]
    eid = h.eid()
    if kind == "submit":
        return ev.Submit(eid, _random_spec(data, h))
    if kind == "assign":
        pending = sorted(h.state.pending) or [("/alice/none", 0)]
        job_id, index = data.draw(st.sampled_from(pending))
        job = h.state.jobs.get(job_id)
        size = job.spec.gang_size if job else 1
        first = index - index % size
        return ev.Assign(eid, tuple(
            ev.Placement(job_id, i, data.draw(st.sampled_from(_WORKERS)), f"att{next(ids)}")
            for i in range(first, first + size)))
    if kind in ("building", "running", "preempt"):
        cls = {"building": ev.AttemptBuilding, "running": ev.AttemptRunning,
               "preempt": ev.Preempted}[kind]
        return cls(eid, data.draw(st.sampled_from(attempts)))
    if kind == "exit":
        return ev.AttemptExited(eid, data.draw(st.sampled_from(attempts)),
                                data.draw(st.sampled_from([0, 1])), "", b"res")
    if kind == "lost":
        return ev.WorkerLost(eid, data.draw(st.sampled_from(_WORKERS)))
    if kind == "kill":
        return ev.Kill(eid, data.draw(st.sampled_from(sorted(h.state.jobs) or ["/alice/x"])))
    if kind == "tick":
        h.advance(data.draw(st.sampled_from([1.0, 30.0, 60.0])))
        return ev.Tick(eid)
    if kind == "reconcile":
        running = data.draw(st.lists(st.sampled_from([*attempts, "att-ghost"]), max_size=3))
        return ev.Reconcile(eid, data.draw(st.sampled_from(_WORKERS)), tuple(running))
    return ev.Prune(eid, retention_s=data.draw(st.sampled_from([0.0, 100.0])))


# IRIS_FUZZ_EXAMPLES=2000 for a longer hunt; 60 keeps the file at ~10 s on a loaded machine.
@settings(max_examples=int(os.environ.get("IRIS_FUZZ_EXAMPLES", "60")), deadline=None,
          database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_kernel_random_events_keep_invariants_replay_and_reload(data):
    ids = itertools.count()
    with tempfile.TemporaryDirectory() as tmp, JobStore(tmp) as store:
        h = Harness(store=store)
        for _ in range(data.draw(st.integers(5, 60))):
            event = _random_event(data, h, ids)
            before = snapshot(h.state)
            try:
                effects = h.send(event)
            except (InvalidRequestError, NotFoundError, ConflictError):
                assert snapshot(h.state) == before, f"refused {event} changed state"
                continue
            if not any(isinstance(e, ev.Persist) for e in effects):
                assert snapshot(h.state) == before, f"{event} changed state without a Persist"
        replay = KernelState()
        for event, now in h.log:
            replay, _ = handle(replay, event, now)
        assert snapshot(replay) == snapshot(h.state)
        loaded = store.load()
        check_invariants(loaded)
        assert snapshot(loaded) == snapshot(h.state)
        # A running attempt is never held by two tasks, nor by a finished task.
        running = [t.attempt_id for t in h.state.tasks.values()
                   if t.state is TaskState.RUNNING]
        assert len(running) == len(set(running))
