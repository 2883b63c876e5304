"""Read-only job views: what `job.status()` and `iris job list --json` will show."""

from __future__ import annotations

import json

import pytest

from iris.base.errors import NotFoundError
from iris.controller.jobs.views import desired_attempts, job_view, list_jobs
from tests.controller.test_job_support import Harness, spec


def test_job_view_shows_task_states_workers_and_error():
    h = Harness()
    job = h.submit(spec("train", replicas=2))
    h.run(job, 0, worker="w7")
    h.exit(h.run(job, 1, worker="w8"), 1, error="ValueError: bad lr")
    view = job_view(h.state, job)
    assert view["state"] == "failed" and view["error"] == (
        "task 1: ValueError: bad lr (retry budget spent)")
    assert [(t["state"], t["worker_id"]) for t in view["tasks"]] == [
        ("killed", "w7"), ("failed", "w8")]
    json.dumps(view)   # safe to send as is
    with pytest.raises(NotFoundError):
        job_view(h.state, "/alice/nope")


def test_list_jobs_filters_by_prefix_and_liveness():
    h = Harness()
    parent = spec("p")
    h.submit(parent)
    h.submit(spec("c", parent_spec=parent))
    h.submit(spec("pp"))
    done = h.submit(spec("done"))
    h.exit(h.run(done), 0)
    assert [j["job_id"] for j in list_jobs(h.state, prefix="/alice/p")] == [
        "/alice/p", "/alice/p/c"]
    live = list_jobs(h.state, include_finished=False)
    assert [j["job_id"] for j in live] == ["/alice/p", "/alice/p/c", "/alice/pp"]
    assert live[0]["task_counts"] == {"pending": 1}


def test_desired_attempts_lists_only_live_attempts_on_that_worker():
    h = Harness()
    a = h.run(h.submit(spec("a")), worker="w1")
    h.assign(h.submit(spec("b")), 0, worker="w2")
    h.exit(h.run(h.submit(spec("c")), worker="w1"), 0)
    assert desired_attempts(h.state, "w1") == [
        {"attempt_id": a, "job_id": "/alice/a", "task_index": 0, "state": "running"}]
    assert desired_attempts(h.state, "w9") == []
    assert h.state.summary() == {"jobs": 3, "jobs_finished": 1, "tasks_pending": 0,
                                 "attempts_active": 2}
