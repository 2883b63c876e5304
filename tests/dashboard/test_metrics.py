"""/metrics: Prometheus text that prometheus_client parses, whose numbers move as jobs run."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

import iris
from iris.base.clock import SYSTEM_CLOCK
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


def _fresh(dash, after: float) -> dict | None:
    samples = _samples(dash.get("metrics")[1])
    return samples if samples[("iris_snapshot_timestamp_seconds", ())] > after else None


def _count(samples: dict, name: str) -> float:
    return samples.get((name, ()), 0)


def test_metrics_parse_and_count_jobs_tasks_workers_and_calls_as_a_job_runs(dash_current):
    dash = dash_current
    status, _ = dash.get("metrics")
    assert status == 200
    # The snapshot may predate jobs the fixture saw finish: start from one taken after them.
    started = SYSTEM_CLOCK.wall()
    before = wait_until(lambda: _fresh(dash, started), "a snapshot newer than the test")
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
    # The controller's node called the worker to start the probe: its calls were timed.
    ok = ("iris_actor_calls_total", (("outcome", "ok"),))
    assert after[ok] > before[ok]
    latency = "iris_actor_call_duration_seconds"
    assert _count(after, f"{latency}_count") > _count(before, f"{latency}_count")
    assert _count(after, f"{latency}_sum") > _count(before, f"{latency}_sum")
    assert after[(f"{latency}_bucket", (("le", "+Inf"),))] == after[(f"{latency}_count", ())]
    # Every scheduling pass the probe needed was timed too.
    passes = "iris_scheduling_pass_duration_seconds_count"
    assert _count(after, passes) > _count(before, passes)
    # ...and the controller actor timed handling the submit and the worker's reports.
    handled = ("iris_actor_handling_seconds_count", (("actor", "/iris/controller"),))
    assert after[handled] > before[handled]


def test_metrics_log_shipping_figures_appear_once_a_worker_shipped_output(dash):
    # `run` printed a line and keeps running: its worker's live shipper stored that line
    # some time after it was printed (at least one flush interval).
    def lag():
        samples = _samples(dash.get("metrics")[1])
        value = samples.get(("iris_log_shipping_lag_seconds", ()))
        return samples if value else None

    samples = wait_until(lag, "a worker to report its shipping lag")
    assert 0 < samples[("iris_log_shipping_lag_seconds", ())] < WAIT_S
    assert samples[("iris_log_dropped_lines_total", ())] == 0


def test_metrics_declare_every_family_and_invent_no_numbers(dash):
    text = dash.get("metrics")[1]
    families = _families(text)
    assert families["iris_scheduling_pass_duration_seconds"] == "histogram"
    assert families["iris_actor_call_duration_seconds"] == "histogram"
    for name in ("iris_gang_reservations", "iris_actor_calls", "iris_log_dropped_lines"):
        assert families[name] == "counter"
    for name in ("iris_slices", "iris_scale_group_slice_limit", "iris_zone_backoff_seconds",
                 "iris_log_shipping_lag_seconds"):
        assert families[name] == "gauge"
    assert "not wired" not in text
    samples = _samples(text)
    # No gang ran on this cluster's single worker: no outcome is above 0 (the controller
    # publishes true zeros, or nothing before any region actor exists).
    for outcome in ("reserved", "committed", "aborted", "expired"):
        assert samples.get(("iris_gang_reservations_total", (("outcome", outcome),)), 0) == 0
    # This controller has no autoscaler: slices are unknown, not zero.
    if not dash.get("api/capacity")[1]["autoscaler"]:
        assert not [k for k in samples if k[0] in ("iris_slices", "iris_zone_backoff_seconds")]


def test_render_publishes_every_source_once_the_snapshot_has_it(capacity_snapshot):
    snapshot = {
        "jobs_by_state": {"running": 2}, "workers": [
            {"last_heard_s_ago": 4.0, "report_interval_s": 1.0, "late": True},
            {"last_heard_s_ago": 4.0, "report_interval_s": 3.0, "late": False}],
        "summary": {"attempts_active": 2}, "pending_tasks": 0, "at": 1.5,
        "scheduling_passes": {"buckets": {"0.001": 3, "0.01": 5}, "count": 6, "sum_s": 0.04},
        "log_shipping": {"max_flush_lag_s": 0.25, "dropped_lines": 7},
        "gang_reservations": {"reserved": 5, "committed": 3, "aborted": 1, "expired": 1,
                              "released": 2},
        "capacity": capacity_snapshot["capacity"],
    }
    latency = {"buckets": {0.0001: 2, 0.001: 9}, "count": 10, "sum_s": 0.02}
    text = metrics.render(snapshot, {"running": 2}, {"calls_sent": 9},
                          call_outcomes={"ok": 9, "error": 0, "timeout": 1,
                                         "peer_unavailable": 0}, call_latency=latency)
    samples = _samples(text)
    assert samples[("iris_workers", (("state", "late"),))] == 1  # the controller's flag
    assert samples[("iris_workers", (("state", "healthy"),))] == 1
    assert samples[("iris_scheduling_pass_duration_seconds_bucket", (("le", "0.01"),))] == 5
    assert samples[("iris_scheduling_pass_duration_seconds_count", ())] == 6
    assert samples[("iris_log_shipping_lag_seconds", ())] == 0.25
    assert samples[("iris_log_dropped_lines_total", ())] == 7
    assert samples[("iris_node_calls_sent_total", ())] == 9
    for outcome, n in {"reserved": 5, "committed": 3, "aborted": 1, "expired": 1,
                       "released": 2}.items():
        assert samples[("iris_gang_reservations_total", (("outcome", outcome),))] == n
    assert samples[("iris_actor_calls_total", (("outcome", "timeout"),))] == 1
    assert samples[("iris_actor_call_duration_seconds_bucket", (("le", "0.001"),))] == 9
    assert samples[("iris_actor_call_duration_seconds_bucket", (("le", "+Inf"),))] == 10
    group = (("group", "tpu16"), ("region", "us-central2"))
    assert samples[("iris_slices", (*group, ("state", "READY")))] == 1
    assert samples[("iris_slices", (*group, ("state", "PREEMPTED")))] == 1
    assert samples[("iris_slices", (*group, ("state", "FAILED")))] == 0
    assert samples[("iris_scale_group_slice_limit", (("bound", "max"), *group))] == 3
    backoff = samples[("iris_zone_backoff_seconds",
                       (*group, ("zone", "us-central2-b")))]
    assert backoff > 0
