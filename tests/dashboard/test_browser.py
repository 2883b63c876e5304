"""The dashboard in headless Chromium (Debian's chromium driven by playwright): the pages a
user clicks through, with screenshots saved under artifacts/screenshots/."""

from __future__ import annotations

import os

import pytest

from tests.dashboard.conftest import CHROMIUM, SHOTS, job_state, wait_until

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="Debian's chromium is not installed (scripts/test.sh installs it when root)")


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_jobs_page_lists_jobs_in_every_state(dash, page):
    page.goto(dash.handle.url)
    rows = page.locator("tr.job-row")
    for name in ("ok", "bad", "run", "pend"):
        rows.filter(has_text=dash.jobs[name].job_id).first.wait_for()
    assert "failed" in rows.filter(has_text=dash.jobs["bad"].job_id).inner_text()
    assert "NO_CAPACITY" in rows.filter(has_text=dash.jobs["pend"].job_id).inner_text()
    _shot(page, "jobs")
    page.select_option("#f-state", "failed")
    page.click("#f-apply")
    page.locator("tr.job-row", has_text=dash.jobs["ok"].job_id).wait_for(state="detached")
    assert page.locator("tr.job-row", has_text=dash.jobs["bad"].job_id).count() == 1


def test_click_opens_a_job_with_tasks_and_log_tail(dash, page):
    job_id = dash.jobs["bad"].job_id
    page.goto(dash.handle.url)
    page.click(f"a.job-link:text-is('{job_id}')")
    page.locator("#job-title", has_text=job_id).wait_for()
    tasks = page.locator("#tasks").inner_text()
    assert "exit 3" in tasks and "w-" in tasks
    page.locator("#log-tail", has_text="about to fail").wait_for()
    _shot(page, "job-failed")


def test_kill_button_kills_the_running_job(dash, page):
    job_id = dash.jobs["victim"].job_id
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{dash.handle.login_url}#/job/{job_id}")  # the address the CLI prints
    page.locator("#log-tail", has_text="kill me").wait_for()
    _shot(page, "job-running")
    page.click("#kill-button")
    page.locator("#job-state", has_text="killed").wait_for()
    assert page.locator("#kill-button").count() == 0
    assert wait_until(lambda: job_state(dash, job_id) == "killed", "the kill to be stored")
    _shot(page, "job-killed")


def test_workers_page_shows_what_is_running(dash, page):
    page.goto(f"{dash.handle.url}#/workers")
    row = page.locator("tr.worker-row").first
    row.filter(has_text=dash.jobs["run"].job_id).wait_for()
    assert "healthy" in row.inner_text()
    # The rule behind the label, on hover: the interval the controller asked for + margin.
    title = row.locator("span.state.healthy").get_attribute("title")
    assert "report interval the controller asked" in title and "late after" in title, title
    _shot(page, "workers")


def test_actors_page_shows_registered_names_and_hosts(dash, page):
    page.goto(f"{dash.handle.url}#/actors")
    row = page.locator("tr.actor-row", has_text="dash-echo")
    row.wait_for()
    assert "127.0.0.1" in row.inner_text()
    _shot(page, "actors")


def test_scheduler_and_capacity_pages_explain_pending_work(dash, page):
    page.goto(f"{dash.handle.url}#/scheduler")
    page.locator("tr.pending-row", has_text=dash.jobs["pend"].job_id).wait_for()
    assert "NO_CAPACITY" in page.locator("#band-interactive").inner_text()
    _shot(page, "scheduler")
    page.click("#nav-capacity")
    page.locator("#capacity-note", has_text="no autoscaler").wait_for()
    _shot(page, "capacity-none")


def test_capacity_page_shows_a_groups_slices_backoff_and_decisions(capacity_dash, page):
    page.goto(f"{capacity_dash.url}#/capacity")
    page.locator("tr.slice-row", has_text="iris-tpu16-1").wait_for()
    counts = page.locator(".scale-group .slice-counts").inner_text()
    assert "ready 1" in counts and "booting 0" in counts and "preempted 1" in counts
    assert "READY" in page.locator("tr.slice-row", has_text="iris-tpu16-1").inner_text()
    assert "deleting" in page.locator("tr.slice-row", has_text="iris-old-7").inner_text()
    backoff = page.locator("tr.backoff-row").inner_text()
    assert "us-central2-b" in backoff and "ZONE_RESOURCE_POOL_EXHAUSTED" in backoff
    newest = page.locator("tr.decision-row").first.inner_text()
    assert "delete" in newest and "iris-old-7" in newest and "preempted" in newest
    assert page.locator("tr.decision-row").count() == 4
    _shot(page, "capacity")
