"""The dashboard as a user reads it, in headless Chromium: a job's command, resources and
durations, its attempts, a log viewer (task, stream, text filter, timestamps, follow,
download), user actors first, empty states, times that do not wrap, the charts strip.
Screenshots go to artifacts/screenshots/product-*.png."""

from __future__ import annotations

import re

import pytest

import iris
from tests.dashboard.conftest import (
    CHROMIUM,
    WAIT_S,
    Echo,
    cluster_with_dashboard,
    http,
    wait_until,
)
from tests.dashboard.test_browser import _shot

pytestmark = pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM),
                                reason="Debian's chromium is not installed")

# Two tasks, each printing to stdout and stderr in turn: the viewer must keep them apart by
# task and by stream. Each line waits until the worker has read its pipe (FIONREAD == 0),
# so the order written is a fact on any load (see tests/worker/test_worker_process.py).
MIXED = ("import fcntl, os, struct, sys, termios\n"
         "def say(text, stream, fd):\n"
         "    print(text, file=stream, flush=True)\n"
         "    while struct.unpack('i', fcntl.ioctl(fd, termios.FIONREAD, bytes(4)))[0]:\n"
         "        pass\n"
         "t = os.environ['IRIS_TASK_INDEX']\n"
         "for i in range(3):\n"
         "    say(f'task {t} out {i}', sys.stdout, 1)\n"
         "    say(f'task {t} err {i}', sys.stderr, 2)\n"
         "say(f'task {t} loss=0.{t}5', sys.stdout, 1)\n")


def square(x: int) -> int:
    print("squaring", x)
    return x * x


@pytest.fixture(scope="module")
def product(tmp_path_factory):
    with cluster_with_dashboard(tmp_path_factory.mktemp("product"), workers=1, worker_cpu=4,
                                stop_grace_s=1.0) as (_, handle):
        Echo.serve("trainer")
        Echo.serve("/iris/probe")  # stands in for an actor of Iris's own
        jobs = {
            "mixed": iris.submit(["python", "-c", MIXED], name="mixed", replicas=2,
                                 resources=iris.Resources(cpu=0.5, memory="256MiB")),
            "fn": iris.submit(square, 7, name="square"),
            "ticker": iris.submit(["sh", "-c", "i=0; while true; do i=$((i+1)); "
                                   "echo tick $i; sleep 0.5; done"], name="ticker"),
        }
        try:
            jobs["mixed"].wait(WAIT_S)
            jobs["fn"].wait(WAIT_S)
            yield handle, jobs
        finally:
            jobs["ticker"].kill()


def _open_job(page, handle, job) -> None:
    page.goto(f"{handle.url}#/job/{job.job_id}")
    page.locator("#job-title", has_text=job.job_id).wait_for()


def test_job_page_shows_command_resources_replicas_durations_and_attempts(product, page):
    handle, jobs = product
    _open_job(page, handle, jobs["mixed"])
    assert "python -c" in page.locator("#job-command").inner_text()
    resources = page.locator("#job-resources").inner_text()
    assert "cpu 0.5" in resources and "memory 256 MiB" in resources
    assert page.locator("#job-replicas").inner_text().strip() == "2"
    assert re.search(r"\d+(\.\d)? s", page.locator("#job-queued").inner_text())
    assert re.search(r"\d+(\.\d)? s", page.locator("#job-running").inner_text())
    rows = page.locator("#timeline .tl-row")
    assert rows.count() == 2
    assert "task 0 · #0" in rows.nth(0).inner_text() and "exit 0" in rows.nth(0).inner_text()
    assert page.locator("#timeline .tl-run.succeeded").count() == 2
    _shot(page, "product-job")
    _open_job(page, handle, jobs["fn"])
    assert "square" in page.locator("#job-command").inner_text()
    assert "Function" in page.locator("#job-summary").inner_text()


def _log_lines(page) -> list[str]:
    return [t for t in page.locator("#log-tail").inner_text().splitlines() if t.strip()]


def test_log_viewer_filters_by_task_stream_and_text_and_shows_timestamps(product, page):
    handle, jobs = product
    _open_job(page, handle, jobs["mixed"])
    page.locator("#log-tail", has_text="task 1 loss=0.15").wait_for()
    everything = _log_lines(page)
    assert len(everything) == 14
    assert [ln.split("] ", 1)[1] for ln in everything if "task 0" in ln] == [
        "task 0 out 0", "task 0 err 0", "task 0 out 1", "task 0 err 1", "task 0 out 2",
        "task 0 err 2", "task 0 loss=0.05"]  # stdout and stderr in the order written
    page.select_option("#log-task", "1")
    page.locator("#log-tail", has_text="task 0").wait_for(state="detached")
    assert all(ln.startswith("[1.0") for ln in _log_lines(page))
    page.select_option("#log-stream", "stderr")
    wait_until(lambda: _log_lines(page) == ["[1.0 stderr] task 1 err 0",
                                            "[1.0 stderr] task 1 err 1",
                                            "[1.0 stderr] task 1 err 2"], "stderr of task 1")
    page.select_option("#log-stream", "")
    page.select_option("#log-task", "")
    page.fill("#log-filter", "loss=")
    wait_until(lambda: [ln.split("] ", 1)[1] for ln in _log_lines(page)] ==
               ["task 0 loss=0.05", "task 1 loss=0.15"] or
               [ln.split("] ", 1)[1] for ln in _log_lines(page)] ==
               ["task 1 loss=0.15", "task 0 loss=0.05"], "the text filter")
    page.check("#log-ts")
    first = _log_lines(page)[0]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[\d\.0\] task \d loss=", first)
    _shot(page, "product-logs-filtered")


def test_log_viewer_download_gives_the_whole_log_with_timestamps(product, page):
    handle, jobs = product
    _open_job(page, handle, jobs["mixed"])
    page.locator("#log-tail", has_text="task 1 loss=0.15").wait_for()
    page.select_option("#log-task", "0")
    page.locator("#log-tail", has_text="task 1").wait_for(state="detached")
    with page.expect_download() as info:
        page.click("#log-download")
    download = info.value
    assert download.suggested_filename.endswith("-task0.log")
    with open(download.path()) as f:
        text = f.read()
    lines = text.splitlines()
    assert len(lines) == 7 and all(re.match(r"\d{4}-\d\d-\d\dT.*Z \[task 0/attempt 0", ln)
                                   for ln in lines)
    assert "[task 0/attempt 0 stderr] task 0 err 2" in text


def test_log_viewer_follows_a_running_job(product, page):
    handle, jobs = product
    _open_job(page, handle, jobs["ticker"])
    page.locator("#log-tail", has_text="tick ").wait_for()

    def last_tick() -> int:
        ticks = re.findall(r"tick (\d+)", page.locator("#log-tail").inner_text())
        return int(ticks[-1]) if ticks else 0

    seen = last_tick()
    wait_until(lambda: last_tick() > seen + 2, "new lines to appear without a reload")
    assert page.locator("#log-follow").is_checked()
    _shot(page, "product-follow")


def test_actors_page_lists_user_actors_with_internal_ones_behind_a_toggle(product, page):
    handle, _ = product
    page.goto(f"{handle.url}#/actors")
    row = page.locator("tr.actor-row", has_text="/trainer")
    row.wait_for()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row.inner_text())  # wall clock
    assert page.locator("tr.actor-row", has_text="/iris/probe").count() == 0
    assert "1 hidden" in page.locator("#content").inner_text()
    page.check("#show-internal")
    internal = page.locator("tr.actor-row", has_text="/iris/probe")
    internal.wait_for()
    assert "(Iris)" in internal.inner_text()
    assert page.locator("tr.actor-row", has_text="/trainer").count() == 1
    _shot(page, "product-actors")


def test_charts_strip_shows_running_tasks_now(product, page):
    handle, jobs = product
    page.goto(handle.url)
    chart = page.locator("#chart-running")
    chart.wait_for()
    wait_until(lambda: int(chart.locator(".v").inner_text()) >= 1, "the ticker counted")
    assert "last hour" in chart.inner_text()
    assert page.locator("#chart-chips .v").inner_text().strip() == "0"  # a CPU-only cluster
    assert page.locator("#chart-running svg").count() == 1


def test_times_do_not_wrap_even_in_a_narrow_window(product, browser):
    handle, _ = product
    context = browser.new_context(viewport={"width": 900, "height": 700})
    narrow = context.new_page()
    try:
        narrow.goto(handle.url)
        narrow.locator("tr.job-row").first.wait_for()
        heights = narrow.eval_on_selector_all(
            "#jobs .time", "els => els.map(e => e.getClientRects().length)")
        assert heights and all(n == 1 for n in heights), heights
        _shot(narrow, "product-jobs-narrow")
    finally:
        context.close()


def test_empty_cluster_pages_say_what_to_do(tmp_path, page):
    with cluster_with_dashboard(tmp_path, workers=0) as (_, handle):
        page.goto(handle.url)
        assert "iris job run" in page.locator("#jobs-empty").inner_text()
        page.click("#nav-workers")
        assert "iris cluster start --local" in page.locator("#workers-empty").inner_text()
        page.click("#nav-scheduler")
        assert "Nothing is waiting" in page.locator("#scheduler-empty").inner_text()
        page.click("#nav-actors")
        assert "Trainer.serve" in page.locator("#actors-empty").inner_text()
        page.click("#nav-capacity")
        note = page.locator("#capacity-note")
        note.wait_for()
        text = page.locator("#content").inner_text().strip()
        assert text == note.inner_text().strip()  # one message, not two overlapping
        assert "no autoscaler" in text and "--config" in text
        _shot(page, "product-capacity-empty")


def test_job_api_reasons_and_errors_use_human_units(product):
    handle, jobs = product
    status, view = http(f"{handle.url}api/job?id={jobs['mixed'].job_id}")
    assert status == 200
    assert view["resources_text"] == "cpu 0.5 · memory 256 MiB"
    assert view["durations"]["queued_s"] >= 0 and view["durations"]["running_s"] >= 0
    assert not re.search(r"\d{7,}", view["resources_text"] + view["error"])
