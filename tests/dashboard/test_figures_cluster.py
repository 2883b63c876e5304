"""The day-trace figures of a running cluster (issue 17, item 6), read as users and operators do:
/api/figures, /metrics, `iris job status` (and --json) with places in line, and the Figures
page in headless Chromium (screenshot: artifacts/screenshots/figures.png).

A real controller and two local workers that each offer one v5litepod-4 host (4 chips):
- `hog` (interactive) holds one host for the whole module;
- `victim` (batch) runs on the other until `w0` (interactive) evicts it: one preemption,
  and the victim's run wasted (4 chips x its run);
- `w1`, `w2`, `w3` (interactive) then wait for a v5litepod-4 host: 1st, 2nd and 3rd in
  line, each behind the ones before it; the evicted victim waits 1st in batch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import iris
from tests.dashboard.conftest import CHROMIUM, WAIT_S, cluster_with_dashboard, http, wait_until
from tests.dashboard.test_browser import _shot

TPU_HOST = {"accelerator_type": "v5litepod-4", "accelerator_count": "4"}
HOST = iris.Resources(tpu="v5litepod-4", cpu=0.5, memory="128MiB")
SLEEP = ["sh", "-c", "echo holding a v5litepod-4 host; sleep 600"]


@pytest.fixture(scope="module")
def fig(tmp_path_factory):
    with cluster_with_dashboard(tmp_path_factory.mktemp("figures"), workers=2, worker_cpu=1,
                                worker_attrs=TPU_HOST, stop_grace_s=1.0) as (ctx, handle):
        jobs = {"hog": iris.submit(SLEEP, name="hog", resources=HOST, priority="interactive"),
                "victim": iris.submit(SLEEP, name="victim", resources=HOST, priority="batch")}
        try:
            for name in ("hog", "victim"):
                wait_until(lambda n=name: jobs[n].status()["state"] == "running",
                           f"{name} to run")
            jobs["w0"] = iris.submit(SLEEP, name="w0", resources=HOST, priority="interactive")
            wait_until(lambda: jobs["w0"].status()["state"] == "running",
                       "w0 to run in the victim's place")
            for i in (1, 2, 3):
                jobs[f"w{i}"] = iris.submit(SLEEP, name=f"w{i}", resources=HOST,
                                            priority="interactive")
            yield ctx, handle, jobs
        finally:
            for job in jobs.values():
                job.kill()


def _reason(job) -> dict:
    return wait_until(lambda: (job.status().get("pending_reason") or {}).get("details", {})
                      .get("queue") and job.status()["pending_reason"],
                      f"{job.job_id}'s place in line")


def _figures(handle, hours=1) -> dict:
    status, body = http(f"{handle.url}api/figures?hours={hours}")
    assert status == 200, body
    return body


def test_waiting_jobs_say_their_place_in_line_and_whats_ahead(fig):
    _, _, jobs = fig
    ids = {n: j.job_id for n, j in jobs.items()}
    first, second, third = (_reason(jobs[f"w{i}"]) for i in (1, 2, 3))
    assert first["message"].startswith("1st in interactive for v5litepod-4; nothing ahead: ")
    assert second["message"].startswith(
        f"2nd in interactive for v5litepod-4; ahead: {ids['w1']} (4 chips): ")
    assert third["message"].startswith(
        f"3rd in interactive for v5litepod-4; ahead: {ids['w1']} (4 chips), "
        f"{ids['w2']} (4 chips): ")
    assert third["details"]["queue"]["ahead"] == [
        {"job_id": ids["w1"], "asks": "4 chips"}, {"job_id": ids["w2"], "asks": "4 chips"}]
    victim = _reason(jobs["victim"])  # evicted and requeued: alone in its band's line
    assert victim["message"].startswith("1st in batch for v5litepod-4; nothing ahead")


def test_cli_job_status_prints_the_place_in_line_and_json_carries_it(fig):
    ctx, _, jobs = fig
    _reason(jobs["w3"])
    env = {**os.environ, "IRIS_ADDRESS": ctx.address}
    run = [sys.executable, "-m", "iris", "job", "status", jobs["w3"].job_id]
    text = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert text.returncode == 0, text.stderr
    assert re.search(r"pending: 3rd in interactive for v5litepod-4; ahead: \S+/w1 \(4 chips\), "
                     r"\S+/w2 \(4 chips\)", text.stdout), text.stdout
    got = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env,
                         timeout=120)
    queue = json.loads(got.stdout)["pending_reason"]["details"]["queue"]
    assert (queue["position"], queue["band"], queue["accelerator"]) == (
        3, "interactive", "v5litepod-4")


def test_api_figures_show_utilization_queue_times_and_the_preemption(fig):
    _, handle, _ = fig
    full = wait_until(lambda: (lambda f: f["pools"] and f["pools"][0]["busy"] == 8.0 and f)(
        _figures(handle)), "a sample with both hosts busy")
    assert full["pools"] == [{"accelerator": "v5litepod-4", "region": "local", "busy": 8.0,
                              "up": 8.0, "utilization": 1.0}]
    assert full["preemptions"]["evicted"] == 1
    assert full["wasted_chip_hours"] > 0  # the victim's 4 chips for as long as it ran
    assert full["queue"]["interactive"]["count"] >= 2  # hog, w0
    assert full["queue"]["batch"]["count"] >= 1        # victim's first start
    assert full["fragmented_chips"] == 0  # no multi-host gang waits
    series = full["series"]["pools"][0]
    assert (series["accelerator"], series["region"]) == ("v5litepod-4", "local")
    assert series["points"][-1][1:] == [8.0, 8.0, 1.0]
    status, body = http(f"{handle.url}api/figures?hours=2")
    assert status == 400 and body["error"]["field"] == "hours"


def test_metrics_carry_the_same_figures(fig):
    _, handle, _ = fig
    wait_until(lambda: _figures(handle)["preemptions"]["evicted"] == 1, "the eviction")
    text = wait_until(lambda: (lambda t: 'state="busy"} 8' in t and t)(
        http(f"{handle.url}metrics")[1]), "busy chips in /metrics")
    for line in ('iris_pool_units{accelerator="v5litepod-4",region="local",state="up"} 8',
                 'iris_pool_utilization_ratio{accelerator="v5litepod-4",region="local"} 1',
                 'iris_preemptions_total{cause="evicted"} 1',
                 'iris_preemptions_total{cause="machine_lost"} 0',
                 "iris_fragmented_chips 0"):
        assert line in text.splitlines(), line
    assert re.search(r'^iris_queue_time_seconds\{band="interactive",quantile="0.9"\} \S+$',
                     text, re.M)
    wasted = re.search(r"^iris_wasted_chip_hours_total (\S+)$", text, re.M)
    assert wasted and float(wasted.group(1)) > 0


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
def test_figures_page_in_a_browser(fig, page):
    _, handle, jobs = fig
    wait_until(lambda: len(_figures(handle)["series"]["pools"][0]["points"]) >= 2
               if _figures(handle)["series"]["pools"] else False, "two samples", WAIT_S)
    page.goto(f"{handle.url}#/figures")
    chart = page.locator(".util-chart[data-accelerator='v5litepod-4'][data-region='local']")
    chart.wait_for()
    assert int(chart.locator("svg").get_attribute("data-points")) >= 2
    page.locator(".util-chart .util-now", has_text="100 %").wait_for()
    rows = page.locator("#queue-bands tr.band-row")
    assert [rows.nth(i).locator("td").first.inner_text() for i in range(3)] == [
        "production", "interactive", "batch"]
    interactive = rows.nth(1).locator("td")
    assert re.fullmatch(r"[\d.]+ (s|min|h)", interactive.nth(1).inner_text())
    assert page.locator("#fragmented-chips").inner_text() == "0"
    assert page.locator("#fig-preemptions .v").inner_text() == "1"
    _shot(page, "figures")
    page.goto(f"{handle.url}#/job/{jobs['w2'].job_id}")
    page.locator("#pending-reason", has_text="2nd in interactive for v5litepod-4").wait_for()
    _shot(page, "figures-job-in-line")
