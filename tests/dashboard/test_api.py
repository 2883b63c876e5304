"""The dashboard's JSON API on a live local cluster: what each page shows, and bad requests."""

from __future__ import annotations

import json
import re

import pytest

from tests.dashboard.conftest import http, wait_until


def _ids(page: dict) -> set[str]:
    return {j["job_id"] for j in page["jobs"]}


def test_jobs_api_lists_jobs_in_every_state_with_the_pending_reason(dash):
    status, page = dash.get("api/jobs")
    assert status == 200
    by_id = {j["job_id"]: j for j in page["jobs"]}
    jobs = dash.jobs
    assert by_id[jobs["ok"].job_id]["state"] == "succeeded"
    assert by_id[jobs["bad"].job_id]["state"] == "failed"
    assert "code 3" in by_id[jobs["bad"].job_id]["error"]
    assert by_id[jobs["run"].job_id]["state"] == "running"
    assert by_id[jobs["run"].job_id]["task_counts"] == {"running": 1}
    pend = by_id[jobs["pend"].job_id]
    assert pend["state"] == "pending"
    assert pend["pending_reason"]["code"] == "NO_CAPACITY"


def test_jobs_api_filters_by_state_user_and_prefix_sorts_and_pages(dash):
    jobs = dash.jobs
    _, failed = dash.get("api/jobs?state=failed,succeeded")
    assert {jobs["ok"].job_id, jobs["bad"].job_id} <= _ids(failed)
    assert jobs["run"].job_id not in _ids(failed)
    user = dash.get(f"api/jobs?prefix={jobs['ok'].job_id}")[1]["jobs"][0]["user"]
    assert _ids(dash.get("api/jobs?user=nobody-at-all")[1]) == set()
    assert jobs["ok"].job_id in _ids(dash.get(f"api/jobs?user={user}")[1])
    prefix = jobs["victim"].job_id[:-3]  # "/user/vic"
    assert _ids(dash.get(f"api/jobs?prefix={prefix}")[1]) == {jobs["victim"].job_id}
    _, by_name = dash.get("api/jobs?sort=name&order=asc")
    names = [j["job_id"] for j in by_name["jobs"]]
    assert names == sorted(names)
    _, first = dash.get("api/jobs?sort=name&order=asc&per_page=2&page=1")
    _, second = dash.get("api/jobs?sort=name&order=asc&per_page=2&page=2")
    assert first["total"] == by_name["total"] >= 5
    assert [j["job_id"] for j in first["jobs"] + second["jobs"]] == names[:4]


def test_jobs_api_bad_parameter_is_refused_naming_the_field(dash):
    for query, field in [("state=exploded", "state"), ("sort=colour", "sort"),
                         ("page=0", "page"), ("per_page=100000", "per_page"),
                         ("page=two", "page"), ("order=sideways", "order")]:
        status, body = dash.get(f"api/jobs?{query}")
        assert status == 400, query
        assert body["error"]["field"] == field
        assert field in body["error"]["message"]


def test_job_api_shows_tasks_attempts_with_workers_and_exit_codes(dash):
    _, bad = dash.get(f"api/job?id={dash.jobs['bad'].job_id}")
    (task,) = bad["tasks"]
    (attempt,) = task["attempt_list"]
    assert attempt["exit_code"] == 3
    assert attempt["worker_id"].startswith("w-")
    assert bad["pending_reason"] is None
    _, pend = dash.get(f"api/job?id={dash.jobs['pend'].job_id}")
    assert pend["pending_reason"]["code"] == "NO_CAPACITY"


def test_job_api_unknown_job_is_not_found_and_malformed_id_is_refused(dash):
    status, body = dash.get("api/job?id=/nobody/nothing")
    assert status == 404 and "no job /nobody/nothing" in body["error"]["message"]
    status, body = dash.get("api/job?id=relative")
    assert status == 400 and body["error"]["field"] == "id"


def test_log_tail_api_reads_the_job_log_from_the_sink(dash):
    job_id = dash.jobs["run"].job_id

    def tail():
        lines = dash.get(f"api/job/logs?id={job_id}&tail=50")[1]["lines"]
        return [ln for ln in lines if ln["stream"] == "stdout"]

    lines = wait_until(tail, "the running job's output in the log sink")
    assert lines[-1]["text"].strip() == "still running"
    status, body = dash.get(f"api/job/logs?id={job_id}&tail=0")
    assert status == 400 and body["error"]["field"] == "tail"


def test_log_api_filters_by_stream_and_text_and_downloads_with_timestamps(dash):
    job_id = dash.jobs["bad"].job_id
    status, body = dash.get(f"api/job/logs?id={job_id}&stream=stdout&grep=about")
    assert status == 200 and [ln["text"] for ln in body["lines"]] == ["about to fail"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", body["lines"][0]["time"])
    assert dash.get(f"api/job/logs?id={job_id}&stream=stderr")[1]["lines"] == []
    # The environment build's lines (present only if this job built the shared venv) are
    # the build stream's alone, and the task's own output is never among them.
    build = dash.get(f"api/job/logs?id={job_id}&stream=build")[1]["lines"]
    assert all(ln["stream"] == "build" for ln in build)
    assert "about to fail" not in [ln["text"] for ln in build]
    status, text = dash.get(f"api/job/logs/download?id={job_id}&task=0")
    assert status == 200 and re.fullmatch(
        r"\d{4}-\S+Z \[task 0/attempt 0\] about to fail\n", text)


@pytest.mark.parametrize("query,field", [("stream=stdin", "stream"), ("task=x", "task"),
                                         ("task=-1", "task"), ("grep=(", "grep")])
def test_log_api_bad_filter_is_refused_naming_it(dash, query, field):
    status, body = dash.get(f"api/job/logs?id={dash.jobs['bad'].job_id}&{query}")
    assert status == 400 and body["error"]["field"] == field, body


def test_workers_api_groups_workers_and_shows_their_running_attempts(dash):
    _, workers = dash.get("api/workers")
    (group,) = workers["groups"]
    assert group["region"] == "local"
    (worker,) = group["workers"]
    assert worker["health"] == "healthy" and worker["cpu"] == 3.0
    assert worker["late_after_s"] == 2 * worker["report_interval_s"] + 1.0
    assert "late after" in worker["health_rule"]
    running = {a["job_id"] for a in worker["running"]}
    assert dash.jobs["run"].job_id in running


def test_actors_api_lists_registered_names_with_host_and_namespace(dash):
    _, body = dash.get("api/actors")
    echo = [a for a in body["actors"] if a["name"].endswith("/dash-echo")]
    assert len(echo) == 1
    assert echo[0]["host"] == "127.0.0.1"
    assert echo[0]["namespace"] == (echo[0]["name"].rsplit("/", 1)[0] or "/")
    status, body = dash.get("api/actors?prefix=nope")
    assert status == 400 and body["error"]["field"] == "prefix"


def test_scheduler_api_shows_the_pending_queue_by_band_with_why_pending(dash):
    _, body = dash.get("api/scheduler")
    bands = {b["priority"]: b["jobs"] for b in body["bands"]}
    assert list(bands) == ["production", "interactive", "batch"]
    (pend,) = [j for j in bands["interactive"] if j["job_id"] == dash.jobs["pend"].job_id]
    assert pend["pending_tasks"] == 1
    assert "cpu=3" in pend["pending_reason"]["message"]  # names the shape it waits for


def test_capacity_api_says_plainly_when_no_autoscaler_reports(dash):
    _, body = dash.get("api/capacity")
    assert body["configured"] is False and body["autoscaler"] is False
    assert body["regions"] == [] and "no autoscaler" in body["note"]


def test_capacity_api_shows_slices_by_state_backoffs_and_newest_decisions_first(
        capacity_dash):
    status, body = http(capacity_dash.url + "api/capacity")
    assert status == 200 and body["autoscaler"] is True and body["note"] == ""
    (region,) = body["regions"]
    assert region["region"] == "us-central2"
    (group,) = region["groups"]
    assert (group["group"], group["accelerator"], group["max"]) == ("tpu16", "v5litepod-16", 3)
    assert group["counts"] == {"ready": 1, "booting": 0, "preempted": 1, "failed": 0,
                               "deleting": 0}
    ready = [s for s in group["slices"] if s["state"] == "READY"]
    assert [(s["slice_id"], s["hosts"], s["busy"]) for s in ready] == [("iris-tpu16-1", 4, 1)]
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in group["backoff"]["us-central2-b"]["reason"]
    actions = [(d["action"], d["slice_id"]) for d in region["decisions"]]
    assert actions == [("delete", "iris-old-7"), ("create_failed", "iris-tpu16-2"),
                       ("create", "iris-tpu16-2"), ("create", "iris-tpu16-1")]
    assert region["decisions"][0]["ago_s"] == 30.0


def test_kill_without_the_dashboard_header_is_refused_and_the_job_keeps_running(dash):
    job_id = dash.jobs["run"].job_id
    status, body = http(dash.handle.url + "api/job/kill", method="POST",
                        data=json.dumps({"job_id": job_id}).encode(),
                        headers={"Content-Type": "application/json"})
    assert status == 403 and "X-Iris-Dashboard" in body["error"]["message"]
    assert dash.get(f"api/job?id={job_id}")[1]["state"] == "running"


def test_kill_of_an_unknown_job_or_a_bad_body_changes_nothing(dash):
    headers = {"X-Iris-Dashboard": "1", "Content-Type": "application/json",
               "Authorization": f"Bearer {dash.handle.write_token}"}
    status, body = http(dash.handle.url + "api/job/kill", method="POST", headers=headers,
                        data=json.dumps({"job_id": "/nobody/nothing"}).encode())
    assert status == 404
    status, body = http(dash.handle.url + "api/job/kill", method="POST", headers=headers,
                        data=b"not json")
    assert status == 400 and body["error"]["field"] == "body"


def test_kill_without_the_token_is_refused_even_on_loopback(dash):
    job_id = dash.jobs["run"].job_id
    status, body = http(dash.handle.url + "api/job/kill", method="POST",
                        data=json.dumps({"job_id": job_id}).encode(),
                        headers={"Content-Type": "application/json", "X-Iris-Dashboard": "1"})
    assert status == 401 and "token" in body["error"]["message"]
    assert dash.get(f"api/job?id={job_id}")[1]["state"] == "running"
