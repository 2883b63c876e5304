"""The job page's pure parts: what runs, resources and durations, the attempts timeline, raw
byte counts made readable, and the charts strip's samples."""

from __future__ import annotations

from iris.dashboard.history import History
from iris.dashboard.jobview import enrich, humanize, resources_text, what_runs


def _view(**over):
    view = {"job_id": "/u/j", "submitted_at": 100.0, "finished_at": None, "error": "",
            "spec": {"entrypoint": {"kind": "command", "argv": ["python", "train.py",
                                                                 "--lr", "0.1 x"]},
                     "resources": {"cpu": 2.0, "memory": 4 << 30}, "replicas": 1},
            "tasks": [{"index": 0, "error": "", "attempt_list": [
                {"number": 0, "state": "failed", "worker_id": "w1", "assigned_at": 101.0,
                 "started_at": 103.0, "finished_at": 110.0, "exit_code": 3,
                 "error": "killed: out of memory: exceeded its limit of 2147483648 bytes"},
                {"number": 1, "state": "running", "worker_id": "w2", "assigned_at": 111.0,
                 "started_at": 112.0, "finished_at": None, "exit_code": None, "error": ""}]}]}
    view.update(over)
    return view


def test_jobview_names_the_command_quoted_and_a_function_by_name():
    assert what_runs(_view()["spec"]) == {"kind": "command",
                                          "text": "python train.py --lr '0.1 x'"}
    assert what_runs({"entrypoint": {"kind": "callable"}, "function": "train.main"}) == \
        {"kind": "function", "text": "train.main"}


def test_jobview_resources_in_human_units():
    assert resources_text({"cpu": 2.0, "memory": 4 << 30}) == "cpu 2 · memory 4 GiB"
    assert resources_text({"cpu": 1, "tpu": "v5litepod-16"}) == "cpu 1 · tpu v5litepod-16"
    assert resources_text({"cpu": 1, "gpu": "H100", "count": 8}) == "cpu 1 · gpu 8× H100"


def test_jobview_durations_and_timeline_are_seconds_from_submission():
    view = enrich(_view(), now=120.0)
    assert view["durations"] == {"queued_s": 3.0, "running_s": 17.0}  # first start at 103
    first, second = view["timeline"]
    assert (first["assigned_s"], first["started_s"], first["ended_s"]) == (1.0, 3.0, 10.0)
    assert second["live"] and second["ended_s"] == 20.0
    assert first["error"] == "killed: out of memory: exceeded its limit of 2 GiB"


def test_jobview_a_job_that_never_ran_has_queued_so_far_and_no_running_time():
    view = enrich(_view(tasks=[]), now=130.0)
    assert view["durations"] == {"queued_s": 30.0, "running_s": None}
    assert view["timeline"] == []


def test_jobview_humanize_leaves_small_numbers_and_words_alone():
    assert humanize("memory=10995116277760 on a host of 33554432000 bytes") == \
        "memory=10 TiB on a host of 31.2 GiB"
    assert humanize("exited with code 137 after 12 retries") == \
        "exited with code 137 after 12 retries"


def test_history_counts_running_tasks_and_chips_over_a_bounded_window():
    history = History(window_s=60.0, every_s=10.0)
    busy_tpu = {"attempts": ["a1"], "accelerators": 4}
    idle_tpu = {"attempts": [], "accelerators": 4}
    cpu = {"attempts": ["a2", "a3"], "accelerators": 0}
    for i in range(10):
        history.add(1000.0 + 10 * i, {"workers": [busy_tpu, idle_tpu, cpu]})
    view = history.view(now=1090.0, current={"workers": [idle_tpu]})
    assert [p["at"] for p in view["points"]][:2] == [1030.0, 1040.0]  # older ones dropped
    assert view["points"][0] | {"at": 0} == {"at": 0, "running_tasks": 3, "chips_in_use": 4}
    assert view["points"][-1] == {"at": 1090.0, "running_tasks": 0, "chips_in_use": 0}
