"""The pure job kernel: events in, state and effects out. No sockets, no sleeps, no disk."""

from __future__ import annotations

import pytest

from iris.base.errors import ConflictError, InvalidRequestError, NotFoundError
from iris.controller.jobs import events as ev
from iris.controller.jobs.kernel import handle
from iris.controller.jobs.model import TERMINAL_JOB, JobState, TaskState
from iris.controller.jobs.state import KernelState
from tests.controller.test_job_support import T0, Harness, of, snapshot, spec

# ------------------------------------------------------------------------- submit & results


def test_submit_creates_pending_tasks_and_persists_first():
    h = Harness()
    effects = h.send(ev.Submit("e1", spec("train", replicas=3)))
    assert isinstance(effects[0], ev.Persist) and effects[0].event_id == "e1"
    assert of(effects, ev.Accepted) == [ev.Accepted("/alice/train", duplicate=False)]
    assert [h.task_state("/alice/train", i) for i in range(3)] == [TaskState.PENDING] * 3
    assert list(h.state.pending) == [("/alice/train", i) for i in range(3)]
    assert h.job_state("/alice/train") is JobState.PENDING


def test_submit_tpu_gang_makes_one_task_per_slice_host_per_replica():
    h = Harness()
    job = h.submit(spec("tpu", resources={"tpu": "v5litepod-16"}, replicas=2))
    assert h.state.jobs[job].spec.gang_size == 4
    assert len(h.state.job_tasks(job)) == 8


def test_task_success_stores_result_and_finishes_job():
    h = Harness()
    job = h.submit(spec("f", entrypoint={"kind": "callable", "payload": b"pickled-fn"}))
    attempt = h.run(job)
    assert h.job_state(job) is JobState.RUNNING
    effects = h.exit(attempt, 0, result=b"42")
    assert effects[0].results == ((job, 0, b"42"),)
    assert h.task(job).has_result and h.task_state(job) is TaskState.SUCCEEDED
    assert of(effects, ev.JobFinished) == [ev.JobFinished(job, JobState.SUCCEEDED, "")]


def test_submit_same_request_id_returns_same_job_without_change():
    h = Harness()
    first = h.send(ev.Submit("e1", spec("train", request_id="req-1")))
    before = snapshot(h.state)
    again = h.send(ev.Submit("e2", spec("train", request_id="req-1")))
    assert of(first, ev.Accepted)[0].job_id == "/alice/train"
    assert again == [ev.Accepted("/alice/train", duplicate=True)]
    assert snapshot(h.state) == before


def test_submit_request_id_reused_for_other_name_refused_unchanged():
    h = Harness()
    h.submit(spec("train", request_id="req-1"))
    before = snapshot(h.state)
    with pytest.raises(ConflictError, match="req-1"):
        h.send(ev.Submit("e9", spec("other", request_id="req-1")))
    assert snapshot(h.state) == before


def test_submit_name_of_live_job_refused_unchanged():
    h = Harness()
    h.submit(spec("train"))
    before = snapshot(h.state)
    with pytest.raises(ConflictError, match="/alice/train"):
        h.send(ev.Submit("e9", spec("train", replicas=5)))
    assert snapshot(h.state) == before


def test_submit_name_of_finished_job_replaces_it():
    h = Harness()
    job = h.submit(spec("train"))
    h.exit(h.run(job), 0)
    effects = h.send(ev.Submit("e9", spec("train", replicas=2)))
    assert effects[0].deleted_jobs == (job,)
    assert len(h.state.job_tasks(job)) == 2 and h.job_state(job) is JobState.PENDING
    assert not h.state.job_attempts.get(job)


def test_reused_name_numbers_attempts_past_the_replaced_family():
    # A worker fences attempts by number per task: a reused name that restarted at 0 was
    # refused there ("attempt 0 was already claimed") and never ran.
    h = Harness()
    parent = spec("train", max_retries_failure=1)
    job = h.submit(parent)
    h.exit(h.run(job), 1)          # attempts 0 and 1 (one retry) of /alice/train[0]
    first = h.run(job)
    child = h.submit(spec("c", parent_spec=parent))
    h.exit(h.run(child), 0)
    h.send(ev.Kill(h.eid(), job))
    h.exit(first, 143)
    h.submit(spec("train"))
    again = h.state.attempts[h.assign(job, 0)]
    assert again.number == 2       # past attempts 0 and 1 of the killed job
    child_again = h.submit(spec("c", parent_spec=parent))
    assert h.state.attempts[h.assign(child_again, 0)].number >= 2


def test_submit_under_finished_parent_refused_unchanged():
    h = Harness()
    parent = spec("p")
    h.submit(parent)
    h.send(ev.Kill(h.eid(), parent.name))
    before = snapshot(h.state)
    with pytest.raises(InvalidRequestError) as err:
        h.send(ev.Submit("e9", spec("c", parent_spec=parent)))
    assert err.value.field == "parent"
    assert snapshot(h.state) == before


def test_subjob_inherits_user_env_pip_priority_and_nests_name():
    parent = spec("p", env={"A": "1", "B": "2"}, pip=["numpy"], priority="batch")
    child = spec("c", parent_spec=parent, env={"B": "3"}, pip=["torch"])
    assert child.name == "/alice/p/c" and child.user == "alice" and child.parent == "/alice/p"
    assert dict(child.env) == {"A": "1", "B": "3"}
    assert child.pip == ("numpy", "torch") and child.priority == "batch"


# ---------------------------------------------------------------------------- retry budgets


def test_failure_retried_until_failure_budget_spent_then_job_failed():
    h = Harness()
    job = h.submit(spec("train", max_retries_failure=2))
    for expected_failures in (1, 2):
        h.exit(h.run(job), 1, error="boom")
        assert h.task_state(job) is TaskState.PENDING
        assert h.task(job).failures == expected_failures
    effects = h.exit(h.run(job), 1, error="boom")
    assert h.task_state(job) is TaskState.FAILED and h.task(job).attempts == 3
    finished = of(effects, ev.JobFinished)
    assert finished[0].state is JobState.FAILED and "boom" in finished[0].error


def test_preemption_uses_preemption_budget_not_failure_budget():
    h = Harness()
    job = h.submit(spec("train", max_retries_failure=0, max_retries_preemption=1))
    attempt = h.run(job, worker="w1")
    effects = h.send(ev.Preempted(h.eid(), attempt))
    assert of(effects, ev.StopAttempt) == [ev.StopAttempt("w1", attempt, 10.0, "preempted")]
    task = h.task(job)
    assert (task.state, task.failures, task.preemptions) == (TaskState.PENDING, 0, 1)
    effects = h.send(ev.Preempted(h.eid(), h.run(job)))
    assert h.task_state(job) is TaskState.PREEMPTED
    assert of(effects, ev.JobFinished)[0].state is JobState.WORKER_FAILED


def test_worker_lost_retries_its_attempts_on_preemption_budget():
    h = Harness()
    a = h.submit(spec("a", max_retries_preemption=1))
    b = h.submit(spec("b", max_retries_preemption=0))
    h.run(a, worker="w1")
    h.run(b, worker="w1")
    keep = h.run(h.submit(spec("c")), worker="w2")
    effects = h.send(ev.WorkerLost(h.eid(), "w1"))
    assert of(effects, ev.StopAttempt) == []   # nobody left to tell
    assert h.task_state(a) is TaskState.PENDING and h.task(a).preemptions == 1
    assert h.task_state(b) is TaskState.WORKER_FAILED
    assert h.job_state(b) is JobState.WORKER_FAILED
    assert "w1" not in h.state.by_worker and h.state.by_worker["w2"] == {keep}


def _end_badly(h: Harness, path: str, attempt: str) -> None:
    if path == "exit":
        h.exit(attempt, 3)
    elif path == "timeout":
        h.advance(100)
        h.send(ev.Tick(h.eid()))
    elif path == "preempted":
        h.send(ev.Preempted(h.eid(), attempt))
    elif path == "worker_lost":
        h.send(ev.WorkerLost(h.eid(), "w1"))
    else:  # the worker re-registers without it
        h.send(ev.Reconcile(h.eid(), "w1", ()))


@pytest.mark.parametrize(("path", "budget", "final"), [
    ("exit", "failures", TaskState.FAILED),
    ("timeout", "failures", TaskState.FAILED),
    ("preempted", "preemptions", TaskState.PREEMPTED),
    ("worker_lost", "preemptions", TaskState.WORKER_FAILED),
    ("reconcile_missing", "preemptions", TaskState.WORKER_FAILED),
])
def test_each_bad_end_spends_its_own_budget_then_ends_task(path, budget, final):
    h = Harness()
    job = h.submit(spec("t", timeout_s=100, max_retries_failure=1, max_retries_preemption=1))
    _end_badly(h, path, h.run(job, worker="w1"))
    other = "preemptions" if budget == "failures" else "failures"
    task = h.task(job)
    assert task.state is TaskState.PENDING
    assert (getattr(task, budget), getattr(task, other)) == (1, 0)
    _end_badly(h, path, h.run(job, worker="w1"))
    assert h.task_state(job) is final and h.state.jobs[job].state in TERMINAL_JOB


def test_max_task_failures_tolerated_then_job_fails_and_kills_rest():
    h = Harness()
    job = h.submit(spec("train", replicas=3, max_task_failures=1))
    attempts = [h.run(job, i, worker=f"w{i}") for i in range(3)]
    h.exit(attempts[0], 1)
    assert h.job_state(job) is JobState.RUNNING
    effects = h.exit(attempts[1], 1)
    assert h.job_state(job) is JobState.FAILED
    assert h.task_state(job, 2) is TaskState.KILLED
    assert [s.attempt_id for s in of(effects, ev.StopAttempt)] == [attempts[2]]


def test_max_task_failures_allows_success_with_tolerated_failures():
    h = Harness()
    job = h.submit(spec("train", replicas=2, max_task_failures=1))
    h.exit(h.run(job, 0), 1)
    h.exit(h.run(job, 1), 0)
    assert h.job_state(job) is JobState.SUCCEEDED


def test_gang_member_preempted_restarts_whole_gang_without_charging_siblings():
    h = Harness()
    job = h.submit(spec("tpu", resources={"tpu": "v5litepod-16"}, replicas=2))
    attempts = run_gangs(h, job, 8, 4)
    effects = h.send(ev.Preempted(h.eid(), attempts[1]))
    stopped = sorted(s.attempt_id for s in of(effects, ev.StopAttempt))
    assert stopped == sorted(attempts[0:4])
    assert [h.task_state(job, i) for i in range(4)] == [TaskState.PENDING] * 4
    assert [h.task(job, i).preemptions for i in range(4)] == [0, 1, 0, 0]
    assert [h.task_state(job, i) for i in range(4, 8)] == [TaskState.RUNNING] * 4


def test_gang_assign_is_all_or_nothing():
    h = Harness()
    job = h.submit(spec("tpu", resources={"tpu": "v5litepod-16"}, replicas=2))
    first = tuple(ev.Placement(job, i, f"w{i}", f"g{i}") for i in range(4))
    h.send(ev.Assign(h.eid(), first))
    before = snapshot(h.state)
    overlapping = tuple(ev.Placement(job, i, f"w{i}", f"h{i}") for i in range(4, 8)) + (
        ev.Placement(job, 0, "w9", "h0"),)
    with pytest.raises(InvalidRequestError, match="gang"):   # 0 without 1-3
        h.send(ev.Assign("e9", overlapping))
    again = tuple(ev.Placement(job, i, f"w{i}", f"h{i}") for i in range(4))
    effects = h.send(ev.Assign("e10", again))
    assert of(effects, ev.Ignored) and not of(effects, ev.StartAttempt)
    assert snapshot(h.state) == before


def test_gang_assign_part_of_gang_refused():
    h = Harness()
    job = h.submit(spec("tpu", resources={"tpu": "v5litepod-16"}))
    with pytest.raises(InvalidRequestError) as err:
        h.assign(job, 3)
    assert err.value.field == "placements"
    assert all(t.state is TaskState.PENDING for t in h.state.job_tasks(job))


def test_assign_reused_attempt_id_refused_unchanged():
    h = Harness()
    job = h.submit(spec("t", replicas=2))
    used = h.assign(job, 0)
    before = snapshot(h.state)
    for placements in ([(1, used)], [(1, "fresh"), (1, "fresh2")]):
        with pytest.raises(ConflictError):
            h.send(ev.Assign("e9", tuple(ev.Placement(job, i, "w1", a) for i, a in placements)))
    with pytest.raises(ConflictError):
        h.send(ev.Assign("e9", (ev.Placement(job, 1, "w1", "x"), ev.Placement(job, 1, "w2", "x"))))
    assert snapshot(h.state) == before


def test_assign_unknown_task_refused():
    h = Harness()
    with pytest.raises(NotFoundError):
        h.send(ev.Assign("e1", (ev.Placement("/alice/nope", 0, "w1", "a1"),)))


def run_gangs(h: Harness, job: str, tasks: int, size: int) -> list[str]:
    attempts = [f"g{i}" for i in range(tasks)]
    for first in range(0, tasks, size):
        h.send(ev.Assign(h.eid(), tuple(ev.Placement(job, i, f"w{i}", attempts[i])
                                        for i in range(first, first + size))))
    for attempt in attempts:
        h.send(ev.AttemptRunning(h.eid(), attempt))
    return attempts


def test_gang_member_failed_for_good_kills_its_gang():
    h = Harness()
    job = h.submit(spec("tpu", resources={"tpu": "v5litepod-16"}, replicas=2,
                        max_task_failures=4))
    attempts = run_gangs(h, job, 8, 4)
    h.exit(attempts[2], 1, error="segfault")
    assert [h.task_state(job, i) for i in range(4)] == [
        TaskState.KILLED, TaskState.KILLED, TaskState.FAILED, TaskState.KILLED]
    assert h.job_state(job) is JobState.RUNNING


def test_job_error_names_failed_gang_member_not_killed_sibling():
    h = Harness()
    job = h.submit(spec("tpu", resources={"tpu": "v5litepod-16"}))
    attempts = run_gangs(h, job, 4, 4)
    effects = h.exit(attempts[2], 1, error="segfault")
    assert of(effects, ev.JobFinished)[0].error == "task 2: segfault (retry budget spent)"


# ------------------------------------------------------------------------------- timeouts


def test_task_timeout_stops_attempt_and_spends_failure_budget():
    h = Harness()
    job = h.submit(spec("train", timeout_s=60, max_retries_failure=1))
    attempt = h.run(job, worker="w1")
    h.advance(59)
    assert h.send(ev.Tick(h.eid())) == []
    h.advance(1)
    effects = h.send(ev.Tick(h.eid()))
    assert [s.attempt_id for s in of(effects, ev.StopAttempt)] == [attempt]
    assert h.task_state(job) is TaskState.PENDING and "timed out" in h.task(job).error
    h.run(job)
    h.advance(60)
    h.send(ev.Tick(h.eid()))
    assert h.job_state(job) is JobState.FAILED


def test_timeout_after_task_finished_changes_nothing():
    h = Harness()
    job = h.submit(spec("train", timeout_s=60))
    h.exit(h.run(job), 0)
    h.advance(120)
    before = snapshot(h.state)
    assert h.send(ev.Tick(h.eid())) == []
    assert snapshot(h.state) == before


def test_scheduling_timeout_makes_job_unschedulable_and_kills_placed_tasks():
    h = Harness()
    job = h.submit(spec("train", replicas=2, scheduling_timeout_s=300))
    placed = h.run(job, 0)
    h.advance(300)
    effects = h.send(ev.Tick(h.eid()))
    assert h.task_state(job, 1) is TaskState.UNSCHEDULABLE
    assert h.task_state(job, 0) is TaskState.KILLED
    assert [s.attempt_id for s in of(effects, ev.StopAttempt)] == [placed]
    assert of(effects, ev.JobFinished)[0].state is JobState.UNSCHEDULABLE


def test_scheduling_timeout_restarts_when_task_requeued():
    h = Harness()
    job = h.submit(spec("train", scheduling_timeout_s=100, max_retries_failure=1))
    h.advance(90)
    attempt = h.run(job)
    h.advance(50)
    h.exit(attempt, 1)          # back to PENDING at T0+140: its own 100 s start now
    h.advance(60)
    h.send(ev.Tick(h.eid()))    # T0+200: the first deadline (T0+100) is stale
    assert h.task_state(job) is TaskState.PENDING
    h.advance(40)
    h.send(ev.Tick(h.eid()))
    assert h.task_state(job) is TaskState.UNSCHEDULABLE


# ---------------------------------------------------------------------------- kill cascade


def test_kill_cascades_to_subjobs_and_stops_their_attempts():
    h = Harness()
    parent = spec("p")
    child = spec("c", parent_spec=parent)
    grandchild = spec("g", parent_spec=child)
    other = spec("other")
    running = {}
    for s in (parent, child, grandchild, other):
        h.submit(s)
        running[s.name] = h.run(s.name)
    effects = h.send(ev.Kill(h.eid(), parent.name))
    killed = {f.job_id for f in of(effects, ev.JobFinished)}
    assert killed == {"/alice/p", "/alice/p/c", "/alice/p/c/g"}
    assert {f.state for f in of(effects, ev.JobFinished)} == {JobState.KILLED}
    assert {s.attempt_id for s in of(effects, ev.StopAttempt)} == {
        running[n] for n in killed}
    assert h.job_state("/alice/other") is JobState.RUNNING


def test_parent_success_kills_live_subjobs():
    h = Harness()
    parent = spec("p")
    h.submit(parent)
    h.submit(spec("c", parent_spec=parent))
    h.exit(h.run(parent.name), 0)
    assert h.job_state("/alice/p") is JobState.SUCCEEDED
    assert h.job_state("/alice/p/c") is JobState.KILLED
    assert "/alice/p ended" in h.state.jobs["/alice/p/c"].error


def test_kill_unknown_job_refused_and_finished_job_ignored():
    h = Harness()
    with pytest.raises(NotFoundError):
        h.send(ev.Kill("e1", "/alice/nope"))
    job = h.submit(spec("t"))
    h.send(ev.Kill(h.eid(), job))
    assert of(h.send(ev.Kill(h.eid(), job)), ev.Ignored)


# ---------------------------------------------------------------------- fencing & reconcile


def test_stale_attempt_exit_ignored_and_changes_nothing():
    h = Harness()
    job = h.submit(spec("train", max_retries_preemption=5))
    old = h.run(job, worker="w1")
    h.send(ev.Preempted(h.eid(), old))
    h.run(job, worker="w2")
    before = snapshot(h.state)
    effects = h.exit(old, 0, result=b"late")
    assert [type(e) for e in effects] == [ev.Ignored] and old in effects[0].reason
    assert snapshot(h.state) == before


def test_stale_attempt_reporting_running_is_stopped():
    h = Harness()
    job = h.submit(spec("train"))
    old = h.run(job, worker="w1")
    h.send(ev.Preempted(h.eid(), old))
    before = snapshot(h.state)
    effects = h.send(ev.AttemptRunning(h.eid(), old))
    assert of(effects, ev.StopAttempt)[0].attempt_id == old
    assert snapshot(h.state) == before


def test_reconcile_keeps_wanted_kills_unknown_fails_missing_resends_assigned():
    h = Harness()
    kept = h.run(h.submit(spec("kept")), worker="w1")
    missing_job = h.submit(spec("missing"))
    missing = h.run(missing_job, worker="w1")
    assigned = h.assign(h.submit(spec("assigned")), 0, worker="w1")
    effects = h.send(ev.Reconcile(h.eid(), "w1", (kept, "att-unknown")))
    assert of(effects, ev.StopAttempt) == [
        ev.StopAttempt("w1", "att-unknown", 10.0, "not wanted by the controller")]
    assert [s.attempt_id for s in of(effects, ev.StartAttempt)] == [assigned]
    assert h.state.attempts[kept].state is TaskState.RUNNING
    assert h.state.attempts[missing].state is TaskState.WORKER_FAILED
    assert h.task_state(missing_job) is TaskState.PENDING
    assert h.task(missing_job).preemptions == 1


# ------------------------------------------------------------------------- prune & replay


def test_prune_forgets_only_jobs_finished_before_retention():
    h = Harness()
    old = h.submit(spec("old"))
    h.exit(h.run(old), 0)
    h.advance(3600)
    new = h.submit(spec("new"))
    h.exit(h.run(new), 0)
    live = h.submit(spec("live"))
    h.advance(1800)
    effects = h.send(ev.Prune(h.eid(), retention_s=3000))
    assert effects[0].deleted_jobs == (old,)
    assert set(h.state.jobs) == {new, live}
    assert not any(a.job_id == old for a in h.state.attempts.values())


def test_replaying_logged_events_rebuilds_identical_state():
    h = Harness()
    job = h.submit(spec("train", replicas=2, max_retries_failure=1, timeout_s=30))
    h.exit(h.run(job, 0), 1)
    h.run(job, 0)
    h.run(job, 1, worker="w2")
    h.advance(31)
    h.send(ev.Tick(h.eid()))
    h.send(ev.WorkerLost(h.eid(), "w2"))
    replay = KernelState()
    for event, now in h.log:
        replay, _ = handle(replay, event, now)
    assert snapshot(replay) == snapshot(h.state)


def test_unknown_event_type_refused():
    with pytest.raises(InvalidRequestError):
        handle(KernelState(), object(), T0)
