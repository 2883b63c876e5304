"""/metrics: Prometheus text that prometheus_client parses, whose numbers move as jobs run."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

import iris
from iris.dashboard import metrics
from tests.dashboard.conftest import WAIT_S, wait_until


def _samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def test_metrics_parse_and_count_jobs_tasks_workers_and_calls_as_a_job_runs(dash_current):
    dash = dash_current
    status, before_text = dash.get("metrics")
    assert status == 200
    before = _samples(before_text)
    assert before[("iris_workers", (("state", "healthy"),))] == 1
    assert before[("iris_jobs", (("state", "pending"),))] >= 1
    assert before[("iris_tasks", (("state", "running"),))] >= 1  # `run` (victim may be killed)

    job = iris.submit(["true"], name="metrics-probe")
    assert job.wait(WAIT_S)["state"] == "succeeded"
    succeeded = ("iris_jobs", (("state", "succeeded"),))

    def moved():
        after = _samples(dash.get("metrics")[1])
        return after if after[succeeded] == before[succeeded] + 1 else None

    after = wait_until(moved, "the succeeded-jobs gauge to count the probe")
    assert (after[("iris_node_calls_received_total", ())]
            > before[("iris_node_calls_received_total", ())])
    assert (after[("iris_tasks", (("state", "succeeded"),))]
            == before[("iris_tasks", (("state", "succeeded"),))] + 1)


def test_metrics_declare_unwired_families_without_inventing_numbers(dash):
    text = dash.get("metrics")[1]
    families = _families(text)
    assert families["iris_scheduling_pass_duration_seconds"] == "histogram"
    assert families["iris_actor_call_duration_seconds"] == "histogram"
    samples = _samples(text)
    # Region actors do not exist: reservations really are 0, and HELP says why.
    for outcome in ("reserved", "committed", "aborted", "expired"):
        assert samples[("iris_gang_reservations_total", (("outcome", outcome),))] == 0
    assert "not wired yet" in text
    # Unknown is not zero: no lag or dropped-lines sample until workers report them.
    assert not [k for k in samples if k[0].startswith("iris_log_")]


def test_render_publishes_histograms_and_shipping_stats_once_the_snapshot_has_them():
    snapshot = {
        "jobs_by_state": {"running": 2}, "workers": [{"last_heard_s_ago": 4.0}],
        "summary": {"attempts_active": 2}, "pending_tasks": 0, "at": 1.5,
        "scheduling_passes": {"buckets": {"0.001": 3, "0.01": 5}, "count": 6, "sum_s": 0.04},
        "log_shipping": {"max_flush_lag_s": 0.25, "dropped_lines": 7},
    }
    text = metrics.render(snapshot, {"running": 2}, {"calls_sent": 9})
    samples = _samples(text)
    assert samples[("iris_workers", (("state", "late"),))] == 1
    assert samples[("iris_scheduling_pass_duration_seconds_bucket", (("le", "0.01"),))] == 5
    assert samples[("iris_scheduling_pass_duration_seconds_count", ())] == 6
    assert samples[("iris_log_shipping_lag_seconds", ())] == 0.25
    assert samples[("iris_log_dropped_lines_total", ())] == 7
    assert samples[("iris_node_calls_sent_total", ())] == 9
