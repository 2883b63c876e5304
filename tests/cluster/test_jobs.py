"""Jobs on a local cluster with real worker processes: results, retries, kills, logs, actors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import iris
from iris.base.errors import InvalidRequestError


def add(a, b):
    return a + b


def whoami():
    return {k: os.environ[k] for k in ("IRIS_JOB_ID", "IRIS_TASK_INDEX", "IRIS_NUM_TASKS",
                                       "IRIS_ATTEMPT_ID", "IRIS_ADDRESS")}


def fail_once(marker: str):
    """Fails on its first attempt, succeeds on the next (the marker file remembers)."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first attempt fails on purpose")
    return "second attempt"


def explode():
    raise ValueError("task blew up")


def test_callable_job_returns_its_value(jobs_cluster):
    assert iris.submit(add, 2, 40).result(timeout=120) == 42


def test_command_job_succeeds_and_its_output_is_in_the_logs(jobs_cluster):
    job = iris.submit(["python", "-c", "print('hello'); print('world')"])
    assert job.wait(120)["state"] == "succeeded"
    lines = list(job.logs())
    assert [line.text.strip() for line in lines if line.stream == "stdout"] == ["hello", "world"]
    # The environment build's progress (when this job built it) is a stream of its own,
    # never mixed into what the task printed.
    assert [line for line in lines if line.stream == "stderr"] == []
    assert all(line.stream in ("stdout", "build") for line in lines)


def test_replicas_each_get_their_index_and_the_shared_job_id(jobs_cluster):
    job = iris.submit(whoami, replicas=3)
    values = job.result(timeout=120)
    assert sorted(int(v["IRIS_TASK_INDEX"]) for v in values) == [0, 1, 2]
    assert {v["IRIS_JOB_ID"] for v in values} == {job.job_id}
    assert {v["IRIS_NUM_TASKS"] for v in values} == {"3"}
    assert len({v["IRIS_ATTEMPT_ID"] for v in values}) == 3


def test_failure_budget_retries_a_failed_task(jobs_cluster, tmp_path):
    job = iris.submit(fail_once, str(tmp_path / "marker"), max_retries_failure=1)
    assert job.result(timeout=120) == "second attempt"
    task = job.tasks()[0]
    assert task["attempts"] == 2 and task["failures"] == 1


def test_exhausted_failure_budget_fails_the_job_with_the_task_error(jobs_cluster):
    job = iris.submit(explode)
    with pytest.raises(ValueError, match="task blew up") as info:  # the task's own error
        job.result(timeout=120)
    assert info.value.job_status["state"] == "failed"
    assert "in explode" in info.value.remote_traceback
    assert info.value.remote_traceback.count("Traceback") == 1
    assert "task blew up" in "".join(line.text for line in job.logs())


def test_nonzero_exit_of_a_command_fails_the_job(jobs_cluster):
    job = iris.submit(["python", "-c", "import sys; sys.exit(3)"])
    status = job.wait(120)
    assert status["state"] == "failed" and "3" in status["tasks"][0]["error"]


def test_submit_with_the_same_request_id_returns_the_same_job(jobs_cluster):
    request = uuid.uuid4().hex
    first = iris.submit(add, 1, 1, request_id=request)
    second = iris.submit(add, 1, 1, request_id=request)
    assert first.job_id == second.job_id
    assert first.result(timeout=120) == 2


@pytest.mark.parametrize("options, field", [
    ({"resources": None, "replicas": 0}, "replicas"),
    ({"resources": None, "priority": "urgent"}, "priority"),
    ({"resources": None, "max_retries_failure": -1}, "max_retries_failure"),
])
def test_bad_submission_is_refused_naming_the_field_and_changes_nothing(jobs_cluster, options,
                                                                        field):
    before = iris.current().node.call(iris.current().address, "/iris/controller", "list_jobs",
                                      ).result(30)
    with pytest.raises(InvalidRequestError) as info:
        iris.submit(add, 1, 2, **options)
    assert info.value.field == field
    after = iris.current().node.call(iris.current().address, "/iris/controller", "list_jobs",
                                     ).result(30)
    assert after == before


def test_unknown_accelerator_is_refused_before_submit():
    with pytest.raises(InvalidRequestError) as info:
        iris.Resources(tpu="v99-8")
    assert info.value.field == "tpu"


def parent_with_child(flag_dir: str):
    child = iris.submit(["python", "-c", "import time; time.sleep(600)"], name="child")
    with open(os.path.join(flag_dir, "child_id"), "w") as f:
        f.write(child.job_id)
    import threading

    threading.Event().wait(600)


def test_kill_cascades_to_sub_jobs(jobs_cluster, tmp_path):
    parent = iris.submit(parent_with_child, str(tmp_path))
    child_file = tmp_path / "child_id"
    for _ in range(2400):  # the parent task writes its child's id once submitted
        if child_file.exists() and child_file.read_text():
            break
        iris.current().node.clock.sleep(0.05)
    child_id = child_file.read_text()
    assert child_id == parent.job_id + "/child"
    parent.kill()
    child = iris.JobHandle(child_id, iris.current())
    assert child.wait(120)["state"] == "killed"
    assert parent.wait(120)["state"] == "killed"


def test_a_name_reused_three_times_runs_each_time(jobs_cluster):
    # Three runs of one name on two workers: at least two land on the same worker, whose
    # fence once refused the second ("attempt 0 was already claimed") and left it pending.
    name = f"reused-{uuid.uuid4().hex[:6]}"
    first = iris.submit(add, 1, 1, name=name)
    first.kill()
    assert first.wait(120)["state"] in ("killed", "succeeded")
    for n in range(2):
        assert iris.submit(add, n, 1, name=name).result(timeout=120) == n + 1


@iris.actor
class Greeter:
    def __init__(self, greeting: str):
        self.greeting = greeting

    def greet(self, name: str) -> str:
        return f"{self.greeting}, {name} (pid {os.getpid()})"


def test_spawn_runs_an_actor_as_a_job_and_returns_its_ref(jobs_cluster):
    ref = iris.spawn(Greeter, "hello", name="greeter")
    answer = ref.greet("iris").result(60)
    assert answer.startswith("hello, iris (pid ") and str(os.getpid()) not in answer


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_killed_actor_job_leaves_the_registry_before_its_process_ends(jobs_cluster,
                                                                       wait_until):
    """Its task closes its context on the stop's SIGTERM: once its process is gone so is
    the name, not a lease (registry.LEASE_S) later; so a caller or the next actor of that
    name never meets the old one."""
    ref, job = iris.spawn_job(Greeter, "hello", name=f"leaver-{uuid.uuid4().hex[:6]}")
    pid = int(ref.greet("iris").result(60).rsplit("pid ", 1)[1].rstrip(")"))
    job.kill()
    wait_until(lambda: not _running(pid), what="the actor's process to end")
    assert ref.name not in {a["name"] for a in jobs_cluster.list_actors("/")}


def test_submit_without_any_cluster_starts_a_local_one(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import iris\n"
                      "def square(x):\n    return x * x\n"
                      "print('RESULT', iris.submit(square, 7).result(timeout=120))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "RESULT 49" in done.stdout and "started a local one" in done.stderr


@pytest.mark.parametrize("resources, message", [
    (iris.Resources(tpu="v5litepod-16"), "no scale group offers v5litepod-16"),
    (iris.Resources(gpu="H100", count=8), "no scale group offers H100"),
    (iris.Resources(cpu=64), "cpu=64: the largest host offers 8"),
])
def test_request_no_worker_could_ever_run_is_refused_at_submit(jobs_cluster, resources,
                                                                 message):
    with pytest.raises(iris.errors.UnschedulableError, match=re.escape(message)) as info:
        iris.submit(add, 1, 2, resources=resources)
    assert info.value.field == "resources"


def hog(megabytes: int) -> int:
    blocks = [bytearray(1 << 20) for _ in range(megabytes)]
    return len(blocks)


def test_memory_limit_is_enforced_through_submit(jobs_cluster):
    from iris.worker import cgroups

    if cgroups.detect() is None:
        pytest.skip("this host offers no writable memory cgroup: limits cannot be enforced")
    job = iris.submit(hog, 400, resources=iris.Resources(memory="64Mi"))
    status = job.wait(120)
    assert status["state"] == "failed"
    assert "out of memory" in status["tasks"][0]["error"].lower()
    assert iris.submit(hog, 16, resources=iris.Resources(memory="256Mi")).result(120) == 16


def test_workspace_directory_is_shipped_once_and_tasks_run_in_it(jobs_cluster, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "helper_mod.py").write_text("VALUE = 'from the workspace'\n")
    (workspace / "data.txt").write_text("payload")
    command = ["python", "-c", "import helper_mod; print(helper_mod.VALUE, open('data.txt').read())"]
    first = iris.submit(command, workspace=workspace)
    second = iris.submit(command, workspace=workspace)  # same content: not uploaded again
    for job in (first, second):
        assert job.wait(120)["state"] == "succeeded"
        assert [line.text.strip() for line in job.logs() if line.stream == "stdout"] == [
            "from the workspace payload"]


def test_submit_naming_an_unknown_bundle_is_refused(jobs_cluster):
    with pytest.raises(InvalidRequestError, match="never uploaded") as info:
        iris.current().node.call(iris.current().address, "/iris/controller", "submit", ({
            "name": "x", "entrypoint": {"kind": "command", "argv": ["true"]},
            "user": "u", "bundle": "0" * 64},)).result(30)
    assert info.value.field == "bundle"


def test_dry_run_answers_where_it_would_fit_and_submits_nothing(jobs_cluster):
    before = len(iris.current().node.call(iris.current().address, "/iris/controller",
                                          "list_jobs").result(30))
    fits = iris.submit(add, 1, 2, replicas=2, resources=iris.Resources(cpu=2), dry_run=True)
    assert fits["fits_now"] is True and len(fits["placements"]) == 2
    workers = {w["worker_id"] for w in iris.current().node.call(
        iris.current().address, "/iris/controller", "list_workers").result(30)}
    assert set(fits["placements"].values()) <= workers
    too_big = iris.submit(add, 1, 2, replicas=5, resources=iris.Resources(cpu=8),
                          dry_run=True)  # 5 tasks of a whole worker each; there are 2
    assert too_big["fits_now"] is False and too_big["pending"]
    assert "does not fit now" in too_big["summary"]
    after = len(iris.current().node.call(iris.current().address, "/iris/controller",
                                         "list_jobs").result(30))
    assert after == before


def alternate_streams(n):
    for i in range(n):
        print(f"out {i}")
        print(f"err {i}", file=sys.stderr)


def test_function_task_stdout_and_stderr_logs_keep_the_order_written(jobs_cluster):
    """1,000 back-to-back prints alternating stdout and stderr: the API and `iris job logs`
    give them in the order written, each with its stream (two pipes read by the worker
    swapped ~44 % of them before the runtime tagged its writes)."""
    job = iris.submit(alternate_streams, 1000)
    job.result(timeout=120)
    want = [(s, f"{'out' if s == 'stdout' else 'err'} {i}")
            for i in range(1000) for s in ("stdout", "stderr")]
    got = [(ln.stream, ln.text.rstrip("\n")) for ln in job.logs()
           if not ln.text.startswith("[iris build]")]
    assert got == want
    out = subprocess.run([sys.executable, "-m", "iris", "job", "logs", job.job_id, "--json",
                          "--address", jobs_cluster.address], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(
                             Path(__file__).resolve().parents[2])})
    assert out.returncode == 0, out.stderr
    import json

    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["stream"], r["text"].rstrip("\n")) for r in rows
            if not r["text"].startswith("[iris build]")] == want


def test_a_job_that_names_its_checkpoint_interval_runs(jobs_cluster):
    job = iris.submit(add, 1, 2, checkpoint_every=1800)
    assert job.result(timeout=120) == 3


def test_a_request_no_host_can_ever_hold_is_refused_in_human_units(jobs_cluster):
    from iris.base.errors import UnschedulableError

    with pytest.raises(UnschedulableError, match=r"memory=10 TiB: the largest host offers"):
        iris.submit(add, 1, 2, resources=iris.Resources(memory="10TiB"))
