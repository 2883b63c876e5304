"""The cloud's preemption notice: a real worker process watching the fake GCE metadata server.

The notice is raised on the fake server; the worker must tell the controller at once (its
task is requeued on the preemption budget while the worker is still alive and reporting,
so not by the heartbeat timeout), and the task's on_preempt callback must get the notice's
deadline, and the task's log must say why it stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import iris
from iris.actors import tokens
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK
from iris.worker import credential
from iris.worker.preemption_notice import PREEMPTED_NOTICE_S, Notice, notice_from
from tests import joining
from tests.providers.fake_metadata_server import FakeMetadataServer

ROOT = Path(__file__).resolve().parents[2]


def _worker(address: str, work_dir: Path, token_file: Path, *extra: str,
            env: dict[str, str] | None = None) -> subprocess.Popen:
    work_dir.mkdir(parents=True, exist_ok=True)
    log = open(work_dir / "worker.log", "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "iris", "worker", "--controller", address, "--work-dir",
             str(work_dir), "--token-file", str(token_file), "--exit-with-parent", *extra],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    finally:
        log.close()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _checkpointing_task(marker: str) -> str:
    """First attempt: wait to be preempted, recording the notice its callback gets."""
    import threading

    import iris

    attempt = int(os.environ["IRIS_ATTEMPT"])
    if attempt == 0:
        def save(notice) -> None:
            with open(marker, "w") as f:
                json.dump({"reason": notice.reason, "deadline": notice.deadline,
                           "called_at": SYSTEM_CLOCK.wall()}, f)
        iris.on_preempt(save)
        print("first attempt running", flush=True)
        threading.Event().wait()
    return f"attempt {attempt} finished"


def _workers(ctx) -> dict[str, dict]:
    listed = ctx.node.call(ctx.address, CONTROLLER_KEY, "list_workers", timeout_s=30).result()
    return {w["worker_id"]: w for w in listed}


def test_notice_from_metadata_values():
    assert notice_from("preempted", "FALSE", 100.0) is None
    assert notice_from("maintenance-event", "NONE", 100.0) is None
    assert notice_from("maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE", 100.0) is None
    notice = notice_from("preempted", "TRUE", 100.0)
    assert notice == Notice("GCE instance/preempted=TRUE", 100.0 + PREEMPTED_NOTICE_S)
    assert notice.time_left(110.0) == PREEMPTED_NOTICE_S - 10.0
    assert notice_from("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 0.0).deadline > 30


@pytest.mark.timeout(300)
def test_gce_preemption_notice_requeues_task_and_runs_on_preempt_with_deadline(tmp_path,
                                                                                wait_until):
    state = tmp_path / "cluster"
    with FakeMetadataServer() as meta, \
            iris.local_cluster(state_dir=state, stop_grace_s=2.0) as ctx:
        token_file = state / "controller" / tokens.CLUSTER_TOKEN_FILE
        gce = _worker(ctx.address, tmp_path / "gce-worker", token_file,
                      env={"GCE_METADATA_HOST": meta.host})  # auto: watches when named
        spare = None
        try:
            meta.wait_for_watchers("preempted")
            gce_id = wait_until(lambda: next(iter(_workers(ctx)), None), 120, "gce worker")
            marker = tmp_path / "notice.json"
            job = iris.submit(_checkpointing_task, str(marker), max_retries_preemption=2)
            wait_until(lambda: any("first attempt running" in line.text
                                   for line in job.logs()), 120, "the first attempt")

            raised_at = SYSTEM_CLOCK.wall()
            meta.raise_preemption()
            task = wait_until(lambda: (t := job.tasks()[0])["preemptions"] and t, 60,
                              "the task to be requeued", explain=job.tasks)
            # Requeued on the notice, by a worker still alive and heartbeating (not lost by
            # silence), on the preemption budget, saying why.
            assert gce_id in _workers(ctx)
            assert task["preemptions"] == 1 and task["failures"] == 0
            assert "preemption notice: GCE instance/preempted=TRUE" in task["error"]

            notice = json.loads(wait_until(lambda: marker.exists() and marker.read_text()
                                           or None, 60, "the on_preempt callback"))
            assert notice["reason"] == "GCE instance/preempted=TRUE"
            assert raised_at + PREEMPTED_NOTICE_S <= notice["deadline"]
            assert notice["deadline"] <= notice["called_at"] + PREEMPTED_NOTICE_S

            # Nothing new goes to the dying worker: the rerun waits for another one.
            spare = _worker(ctx.address, tmp_path / "spare-worker", token_file,
                            "--preemption-notice", "off")
            assert job.result(timeout=120) == "attempt 1 finished"
            assert job.tasks()[0]["worker_id"] != gce_id
            first = [line.text for line in job.logs() if line.attempt == 0]
            assert any("[iris] preemption notice: GCE instance/preempted=TRUE" in t
                       for t in first), first
            assert any("[iris] stopping" in t and "preemption notice" in t for t in first)
        finally:
            for proc in (gce, spare):
                if proc is not None:
                    _stop(proc)


def test_preemption_notice_needs_the_worker_role_and_a_well_formed_message(tmp_path):
    from iris.base.errors import InvalidRequestError, PermissionDeniedError

    state = tmp_path / "cluster"
    with iris.local_cluster(workers=1, state_dir=state) as ctx, \
            iris.connect(ctx.address) as client:  # a separate node: not the controller's own
        [worker] = _workers(ctx).values()
        args = (worker["worker_id"], worker["address"], "GCE instance/preempted=TRUE", 30.0)
        with pytest.raises(PermissionDeniedError):
            client.node.call(ctx.address, CONTROLLER_KEY, "preemption_notice", args,
                             timeout_s=30).result()
        token = tokens.read(state / "controller" / tokens.CLUSTER_TOKEN_FILE)
        with pytest.raises(PermissionDeniedError):  # the join token speaks for nobody
            client.node.call(ctx.address, CONTROLLER_KEY, "preemption_notice", args,
                             timeout_s=30, auth=token).result()
        other = joining.credential(client.node, ctx.address, "w-other")
        with pytest.raises(PermissionDeniedError, match="only as itself"):
            client.node.call(ctx.address, CONTROLLER_KEY, "preemption_notice", args,
                             timeout_s=30, auth=other).result()
        [held] = [c for c in (credential.read(p.parent) for p in state.rglob("credential"))
                  if c is not None and c.worker_id == worker["worker_id"]]
        token = held.credential  # the worker's own, from its work directory
        with pytest.raises(InvalidRequestError, match="time_left_s"):
            client.node.call(ctx.address, CONTROLLER_KEY, "preemption_notice",
                             (*args[:3], -1.0), timeout_s=30, auth=token).result()
        assert worker["worker_id"] in _workers(ctx)
        # A client's job still lands on that worker: nothing was drained by the refusals.
        assert iris.submit(["true"]).wait(timeout=120)["state"] == "succeeded"
