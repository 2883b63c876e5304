"""Scheduling policy on real processes: accelerator fallbacks, budgets, capacity-only jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import iris
from iris.base.errors import InvalidRequestError
from iris.client import budgets
from iris.dashboard import start_dashboard
from tests.dashboard.conftest import http

pytestmark = pytest.mark.slow

# A local worker posing as a one-host TPU slice of the fallback type (no TPU is touched:
# the worker only advertises the type; tasks here never import jax).
V5E_4 = {"accelerator_type": "v5litepod-4", "accelerator_count": "4"}


def accelerator() -> str:
    return os.environ["IRIS_ACCELERATOR"]


def hold(marker_dir: str) -> str:
    Path(marker_dir, "holding").touch()
    gate = threading.Event()
    while not Path(marker_dir, "release").exists() and not gate.wait(0.05):
        pass
    return "released"


def _cli(cluster, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iris", "--address", cluster.address, *argv],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def _no_workers(tmp_path_factory):
    state = tmp_path_factory.mktemp("policy") / "c"
    with iris.local_cluster(workers=0, state_dir=state) as cluster:
        yield cluster, str(state / "controller" / "admin.token")


@pytest.fixture
def no_workers(_no_workers):
    """A cluster without workers shared by the module's tests that only submit (nothing
    runs), current for this test, and its admin token file. Its jobs stay pending, so each
    test looks at its own."""
    from iris.actors.current import current_context

    cluster, admin_token = _no_workers
    token = current_context.set(cluster)
    yield cluster, admin_token
    current_context.reset(token)


@pytest.fixture(scope="module")
def _v5e_worker(tmp_path_factory):
    state = tmp_path_factory.mktemp("policy-v5e") / "c"
    with iris.local_cluster(workers=1, worker_cpu=2, state_dir=state, worker_attrs=V5E_4,
                            stop_grace_s=2) as cluster:
        yield cluster, str(state / "controller" / "admin.token")


@pytest.fixture
def v5e_worker(_v5e_worker):
    """One worker posing as a v5litepod-4 host, shared by two tests, current for this test;
    and the admin token file."""
    from iris.actors.current import current_context

    token = current_context.set(_v5e_worker[0])
    yield _v5e_worker
    current_context.reset(token)


def test_fallback_taken_when_preferred_type_absent(v5e_worker):
    job = iris.submit(accelerator, resources=iris.Resources(tpu="v6e-4,v5litepod-4"))
    assert job.result(timeout=180) == "v5litepod-4"
    (task,) = job.status()["tasks"]
    assert task["accelerator"] == "v5litepod-4"
    assert job.status()["accelerators"] == ["v6e-4", "v5litepod-4"]


def test_fallbacks_of_different_host_counts_refused_at_submit(no_workers):
    with pytest.raises(InvalidRequestError, match="same number of hosts"):
        iris.submit(accelerator, resources=iris.Resources(tpu=["v6e-4", "v5litepod-16"]))
    assert iris.current() is no_workers[0]


def test_over_budget_user_is_demoted_to_batch_and_told(v5e_worker, tmp_path, wait_until):
    cluster, token = v5e_worker
    tpu = iris.Resources(tpu="v5litepod-4")
    running = iris.submit(hold, str(tmp_path), resources=tpu, priority="batch")
    user = running.status()["user"]  # this process's user (the client keeps one)
    try:
        wait_until(lambda: (tmp_path / "holding").exists(), what="alice's batch job running")
        # 1e-6 accelerator-hours: spent in a millisecond by 4 chips, so she is over at once.
        done = _cli(cluster, "user", "budget", "set", user, "--hours", "0.000001",
                    "--admin-token-file", str(token), "--json")
        assert done.returncode == 0, done.stderr
        urgent = iris.submit(accelerator, resources=tpu, priority="production")

        def reason():
            return urgent.status().get("pending_reason", {}).get("message", "")
        message = wait_until(lambda: "over budget" in reason() and reason(),
                             what="the demotion in the pending reason")
        # Its place in line is in the batch line it was demoted to, then why.
        assert message.startswith("1st in batch for v5litepod-4"), message
        assert f"{user} is over budget (" in message, message
        assert "accelerator-hours in 7 days): scheduled as batch" in message
        shown = _cli(cluster, "job", "status", urgent.job_id, "--json")
        assert "scheduled as batch" in json.loads(shown.stdout)["pending_reason"]["message"]
        # As batch it did not evict her running batch job (as production it would have).
        assert running.status()["state"] == "running"
        got = json.loads(_cli(cluster, "user", "budget", "get", user, "--json").stdout)
        assert got["used_hours"] > 0 and got["hours"] == 0.000001
        usage = budgets.list_budgets()["usage"]
        assert [u["over_budget"] is not None for u in usage if u["user"] == user] == [True]
        dashboard = start_dashboard(cluster.node, cluster.address, port=0)
        try:
            status, body = http(dashboard.url + "api/usage")
            assert status == 200
            (row,) = [u for u in body["usage"] if u["user"] == user]
            assert row["used_hours"] > 0 and row["over_budget"].startswith(user)
            assert "usagePage" in http(dashboard.url)[1]
        finally:
            dashboard.stop()
        (tmp_path / "release").touch()
        assert urgent.result(timeout=180) == "v5litepod-4"
    finally:  # the cluster is the module's: the next test's jobs run as this user too
        (tmp_path / "release").touch()
        budgets.set_budget(user, clear=True, admin_token_file=token)
        running.wait(timeout=120)


def test_band_above_cap_refused_at_submit_and_budget_cli_round_trips(no_workers):
    cluster, token = no_workers
    refused = _cli(cluster, "user", "budget", "set", "bob", "--max-priority", "batch")
    assert refused.returncode != 0 and "admin token" in refused.stderr
    set_ = _cli(cluster, "user", "budget", "set", "bob", "--hours", "800",
                "--max-priority", "batch", "--window-days", "7",
                "--admin-token-file", token)
    assert set_.returncode == 0, set_.stderr
    as_bob = {"IRIS_USER": "bob"}
    run = _cli(cluster, "job", "run", "--priority", "production", "--no-wait", "--", "true",
               env=as_bob)
    assert run.returncode != 0
    assert "priority: production is above the cap for user bob: at most batch" in run.stderr
    jobs = json.loads(_cli(cluster, "job", "list", "--json").stdout)
    assert [j for j in jobs if j["user"] == "bob"] == []  # the refused one made none
    ok = _cli(cluster, "job", "run", "--priority", "batch", "--no-wait", "--json", "--",
              "true", env=as_bob)
    assert ok.returncode == 0, ok.stderr
    got = json.loads(_cli(cluster, "user", "budget", "get", "bob", "--json").stdout)
    assert (got["subject"], got["hours"], got["max_priority"], got["window_days"]) == \
        ("bob", 800.0, "batch", 7.0)
    listing = json.loads(_cli(cluster, "user", "budget", "list", "--json").stdout)
    assert "bob" in [b["subject"] for b in listing["budgets"]]
    cleared = _cli(cluster, "user", "budget", "set", "bob", "--clear",
                   "--admin-token-file", token)
    assert cleared.returncode == 0, cleared.stderr
    again = _cli(cluster, "job", "run", "--priority", "production", "--no-wait", "--",
                 "true", env=as_bob)
    assert again.returncode == 0, again.stderr  # the cap went with the budget


def test_band_above_cap_refused_through_the_api(no_workers):
    user = iris.submit(["true"], priority="batch").status()["user"]
    token = no_workers[1]
    budgets.set_budget(user, max_priority="interactive", admin_token_file=token)
    try:
        with pytest.raises(InvalidRequestError, match="at most interactive") as err:
            iris.submit(["true"], priority="production")
        assert err.value.field == "priority"
    finally:  # this process's user submits in the module's other tests
        budgets.set_budget(user, clear=True, admin_token_file=token)


def test_existing_capacity_only_job_says_it_waits_for_hosts_already_up(no_workers, wait_until):
    cluster = no_workers[0]
    job = iris.submit(["true"], existing_capacity_only=True)
    reason = wait_until(lambda: job.status().get("pending_reason"),
                        what="a pending reason")
    assert reason["code"] == "EXISTING_CAPACITY_ONLY"
    assert "waits for existing capacity" in reason["message"]
    assert job.status()["existing_capacity_only"] is True
    run = _cli(cluster, "job", "run", "--existing-capacity-only", "--no-wait", "--json",
               "--", "true")
    assert run.returncode == 0, run.stderr
    with pytest.raises(InvalidRequestError, match="existing_capacity_only"):
        iris.submit(["true"], existing_capacity_only="yes")


def test_budget_survives_controller_restart(tmp_path):
    state = tmp_path / "c"
    with iris.local_cluster(workers=0, state_dir=state):
        budgets.set_budget("carol", hours=5, max_priority="interactive",
                           admin_token_file=state / "controller" / "admin.token")
    with iris.local_cluster(workers=0, state_dir=state):
        assert budgets.get_budget("carol")["max_priority"] == "interactive"


def _zone_b_worker(address: str, tmp_path: Path) -> subprocess.Popen:
    work = tmp_path / "worker-b"
    work.mkdir()
    log = open(work / "worker.log", "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "iris", "worker", "--controller", address, "--work-dir",
             str(work), "--token-file", str(tmp_path / "c" / "controller" / "cluster.token"),
             "--worker-id", "worker-b", "--exit-with-parent", "--attr", "cpu=4",
             "--attr", f"memory={4 * 10**9}", "--attr", "zone=zone-b"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


def test_coordinator_waits_for_its_job_then_follows_it_into_its_zone(tmp_path, wait_until):
    with iris.local_cluster(workers=1, worker_cpu=2, worker_memory="4GB",
                            state_dir=tmp_path / "c", worker_attrs={"zone": "zone-a"}):
        filler = iris.submit(hold, str(tmp_path), resources=iris.Resources(cpu=1))
        wait_until(lambda: (tmp_path / "holding").exists(), what="filler running in zone-a")
        # The job to follow can only run in zone-b, which has no worker yet.
        train = iris.submit(hold, str(tmp_path), name="train", constraints={"zone": "zone-b"},
                            resources=iris.Resources(cpu=1))
        coord = iris.submit(["true"], name="coord", colocate_with="train",
                            resources=iris.Resources(cpu=1))

        def reason():
            return coord.status().get("pending_reason", {})
        waiting = wait_until(lambda: reason().get("code") == "WAITING_FOR_COLOCATED_JOB"
                             and reason(), what="the follower waiting for train")
        assert f"waiting for {train.job_id} to be placed" in waiting["message"]
        worker_b = _zone_b_worker(iris.current().address, tmp_path)
        try:
            # zone-a still has room (and, being busier, is where best fit would put it).
            assert coord.wait(timeout=180)["state"] == "succeeded"
            assert coord.status()["tasks"][0]["worker_id"] == "worker-b"
            assert train.status()["tasks"][0]["worker_id"] == "worker-b"
            assert coord.status()["colocate"] == {"scope": "zone", "job": train.job_id}
        finally:
            (tmp_path / "release").touch()
            train.wait(timeout=120)
            filler.wait(timeout=120)
            worker_b.terminate()
            worker_b.wait(timeout=60)


def gang_member() -> str:
    return f"{os.environ['JAX_PROCESS_ID']}:{os.environ['IRIS_ACCELERATOR']}"


def test_gang_fallback_grows_and_lands_on_the_type_a_group_offers(tmp_path, wait_until):
    """Only v5litepod-16 can be grown: the autoscaler is asked for it (the preferred v6e-16
    has no group), and the gang lands whole on it through the reserve/commit."""
    from iris.controller.config import ScaleGroupConfig
    from iris.controller.providers.local import LocalProvider
    from iris.controller.regions.autoscaler import AutoscalerConfig
    from iris.controller.regions.region import RegionScaling

    group = ScaleGroupConfig("v5e-16", "east", "tpu", "v5litepod-16", 4, 4, ("east-a",),
                             min_slices=0, max_slices=1)
    fast = AutoscalerConfig(scale_up_delay_s=0.2, scale_down_delay_s=2.0,
                            backoff_initial_s=1.0, backoff_max_s=2.0, host_lost_grace_s=2.0,
                            churn_window_s=0.0, poll_interval_s=0.5)
    made: list[LocalProvider] = []

    def provider(address: str) -> LocalProvider:
        made.append(LocalProvider(address, tmp_path / "hosts", "east"))
        return made[0]

    with iris.local_cluster(state_dir=tmp_path / "c", stop_grace_s=2.0,
                            autoscale=[RegionScaling("east", (group,), provider, fast)]):
        job = iris.submit(gang_member, name="gang",
                          resources=iris.Resources(tpu="v6e-16,v5litepod-16", cpu=1))
        assert sorted(job.result(timeout=240)) == [f"{i}:v5litepod-16" for i in range(4)]
        assert {t["accelerator"] for t in job.status()["tasks"]} == {"v5litepod-16"}
        assert len({t["worker_id"] for t in job.status()["tasks"]}) == 4
        wait_until(lambda: made[0].list_slices() == [], 120, "the idle slice deleted")
