"""Reading a job's logs back: merge across tasks, filters, and following a running job."""

from __future__ import annotations

import queue
import threading

import pytest

from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import InvalidRequestError
from iris.logstore.model import format_line
from iris.logstore.reader import LogFilter, follow_logs, read_logs
from iris.logstore.shipper import LogShipper

JOB = "/alice/train"


def _ship(sink, job, task, attempt, lines):
    shipper = LogShipper(sink, job, task, attempt)
    for ts, stream, text in lines:
        shipper.write(stream, text + "\n", ts=ts)
    shipper.close()


@pytest.fixture
def two_tasks(sink):
    _ship(sink, JOB, 0, 0, [(100.0, "stdout", "t0 start"), (102.0, "stderr", "t0 error")])
    _ship(sink, JOB, 1, 0, [(101.0, "stdout", "t1 start")])
    _ship(sink, JOB, 1, 1, [(103.0, "stdout", "t1 retry")])
    _ship(sink, JOB + "/child", 0, 0, [(100.5, "stdout", "child job")])
    return sink


def test_reader_merges_tasks_by_time_with_prefixes(two_tasks):
    lines = read_logs(two_tasks, JOB)
    assert [format_line(ln) for ln in lines] == [
        "[task 0/attempt 0] t0 start",
        "[task 1/attempt 0] t1 start",
        "[task 0/attempt 0 stderr] t0 error",
        "[task 1/attempt 1] t1 retry",
    ]
    assert [ln.stream for ln in lines] == ["stdout", "stdout", "stderr", "stdout"]
    assert lines[0].ts == 100.0


def test_reader_lines_carry_wall_time_as_epoch_and_iso(sink):
    _ship(sink, JOB, 0, 0, [(1767225600.25, "stdout", "new year")])  # 2026-01-01 00:00 UTC
    (line,) = read_logs(sink, JOB)
    assert line.ts == 1767225600.25 and line.iso == "2026-01-01T00:00:00.250Z"
    assert line.to_dict()["time"] == "2026-01-01T00:00:00.250Z"
    assert format_line(line, timestamps=True) == \
        "2026-01-01T00:00:00.250Z [task 0/attempt 0] new year"


def test_reader_keeps_environment_build_output_apart_from_the_tasks(sink):
    _ship(sink, JOB, 0, 0, [(100.0, "build", "Resolved 1 package in 3ms"),
                            (101.0, "stdout", "task output"), (102.0, "stderr", "task warns")])
    assert [ln.text for ln in read_logs(sink, JOB)] == ["task output", "task warns"]
    build = read_logs(sink, JOB, LogFilter(build=True))
    assert [(ln.stream, ln.text) for ln in build] == [("build", "Resolved 1 package in 3ms")]


def test_reader_filters_by_task_since_and_grep(two_tasks):
    def texts(**kw):
        return [ln.text for ln in read_logs(two_tasks, JOB, LogFilter(**kw))]

    assert texts(task=1) == ["t1 start", "t1 retry"]
    assert texts(since=101.5) == ["t0 error", "t1 retry"]
    assert texts(grep=r"start$") == ["t0 start", "t1 start"]
    assert texts(task=0, grep="error") == ["t0 error"]
    assert texts(task=7) == []


def test_reader_unknown_job_reads_no_lines(sink):
    assert read_logs(sink, "/nobody") == []


@pytest.mark.parametrize("kw,field", [({"grep": "("}, "grep"), ({"task": -1}, "task"),
                                      ({"since": float("nan")}, "since"),
                                      ({"since": float("inf")}, "since"),
                                      ({"since": "yesterday"}, "since")])
def test_reader_bad_filter_raises_invalid_request(kw, field):
    with pytest.raises(InvalidRequestError) as info:
        LogFilter(**kw)
    assert info.value.field == field


def test_reader_follow_yields_lines_once_across_compose_and_stops_when_finished(sink):
    finished = threading.Event()
    seen: queue.Queue = queue.Queue()

    def follow():
        for line in follow_logs(sink, JOB, finished.is_set, poll_interval_s=0.05):
            seen.put(line.text)
        seen.put(None)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    shipper = LogShipper(sink, JOB, 0, 0)
    for i in range(3):
        shipper.write("stdout", f"early {i}\n")
    assert [seen.get(timeout=30) for _ in range(3)] == [f"early {i}" for i in range(3)]
    shipper.write("stdout", "late\n")
    stats = shipper.close()  # composes and deletes the chunks the follower already read
    assert stats.composed
    _ship(sink, JOB, 1, 0, [(SYSTEM_CLOCK.wall(), "stdout", "other task")])
    finished.set()
    rest = []
    while (item := seen.get(timeout=30)) is not None:
        rest.append(item)
    follower.join(30)
    assert sorted(rest) == ["late", "other task"]


def test_reader_follow_of_finished_job_reads_everything_and_returns(two_tasks):
    lines = list(follow_logs(two_tasks, JOB, lambda: True, LogFilter(task=0)))
    assert [ln.text for ln in lines] == ["t0 start", "t0 error"]
