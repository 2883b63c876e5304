"""The `iris` command in real subprocesses: demo, keys, cluster start + actor list --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import iris
from tests.conftest import as_current

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONPATH": ROOT}


@pytest.fixture(scope="module")
def _shared(tmp_path_factory):
    """One local worker for the tests that run jobs through the CLI (each names its own)."""
    with iris.local_cluster(workers=1, state_dir=tmp_path_factory.mktemp("cli")) as ctx:
        yield ctx


@pytest.fixture
def one_worker(_shared):
    """The shared cluster, current for this test (fixtures may run in another context)."""
    with as_current(_shared):
        yield _shared


def iris_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iris", *args], capture_output=True,
                          text=True, env=ENV, timeout=timeout)


def test_demo_runs_rollout_tasks_against_the_trainer_and_summarizes_as_json():
    done = iris_cli("demo", "--rollouts", "2", "--iterations", "2", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["state"] == "succeeded" and summary["steps"] == 2
    assert "[task 1/attempt 0] iteration 1: weights v" in done.stderr  # from the log store
    assert "(4 MiB, float32, read-only True)" in done.stderr
    synced = [s for s in summary["syncs"] if s["receivers"]]
    assert synced and all(s["failed"] == 0 and s["gbps_per_rollout"] > 0 for s in synced)
    assert "GB/s per rollout" in done.stderr and summary["trainer_peak_rss_mib"] > 0


def test_demo_sends_the_weight_size_asked_for_and_refuses_a_bad_one():
    done = iris_cli("demo", "--rollouts", "1", "--iterations", "1", "--weights", "24MiB",
                    "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["weights_bytes"] == 24 << 20
    assert "weights v1 (24 MiB" in done.stderr
    bad = iris_cli("demo", "--weights", "lots")
    assert bad.returncode == 2 and "--weights" in bad.stderr and "cannot read size" in bad.stderr


def test_keys_generate_then_refuse_to_overwrite(tmp_path):
    first = iris_cli("keys", "generate", str(tmp_path / "k"))
    assert first.returncode == 0 and (tmp_path / "k" / "authorized" / "cluster.key").exists()
    second = iris_cli("keys", "generate", str(tmp_path / "k"))
    assert second.returncode == 2 and "refusing to overwrite" in second.stderr


def test_cluster_start_then_list_actors_and_workers_as_json(child_process):
    server = child_process("import sys; from iris.cli import main; "
                           "print('READY', flush=True); sys.exit(main(['cluster', 'start', "
                           "'--local', '--workers', '1']))")
    server.wait_ready()
    line = server.proc.stdout.readline()
    assert line.startswith("cluster running at tcp://127.0.0.1:"), line
    address = line.split()[3]
    actors = iris_cli("--address", address, "actor", "list", "--json")
    assert actors.returncode == 0, actors.stderr
    names = [a["name"] for a in json.loads(actors.stdout)]
    assert names == []  # workers are listed by `iris worker list`, not as registered actors
    workers = iris_cli("--address", address, "worker", "list", "--json")
    assert workers.returncode == 0, workers.stderr
    [worker] = json.loads(workers.stdout)
    assert worker["health"] == "healthy" and not worker["late"]
    table = iris_cli("--address", address, "worker", "list")
    assert "health" in table.stdout and "healthy" in table.stdout
    assert "report interval the controller asked" in table.stderr  # the rule, under the table
    server.stop()  # its workers first, then the controller


def test_actor_list_without_an_address_names_the_variable():
    env = {k: v for k, v in ENV.items() if k != "IRIS_ADDRESS"}
    done = subprocess.run([sys.executable, "-m", "iris", "actor", "list"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 2 and "IRIS_ADDRESS" in done.stderr


def _job_ids(address: str) -> set[str]:
    listed = iris_cli("--address", address, "job", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {j["job_id"] for j in json.loads(listed.stdout)}


def test_job_run_streams_output_and_exits_with_the_job_state(one_worker):
    address = one_worker.address
    earlier = _job_ids(address)  # the cluster is the module's: other tests' jobs are there
    ok = iris_cli("--address", address, "job", "run", "--", "python", "-c", "print('hi there')")
    assert ok.returncode == 0, ok.stderr
    assert "hi there" in ok.stdout and "succeeded" in ok.stderr
    bad = iris_cli("--address", address, "job", "run", "--", "python", "-c", "raise SystemExit(4)")
    assert bad.returncode == 1 and "failed" in bad.stderr
    listed = iris_cli("--address", address, "job", "list", "--json")
    assert sorted(j["state"] for j in json.loads(listed.stdout)
                  if j["job_id"] not in earlier) == ["failed", "succeeded"]


def test_job_run_json_prints_the_final_status_alone_on_stdout(one_worker):
    done = iris_cli("--address", one_worker.address, "job", "run", "--json", "--", "python",
                    "-c", "print('hi there'); raise SystemExit(3)")
    assert done.returncode == 1, done.stderr
    status = json.loads(done.stdout)  # the job's output went to stderr
    assert status["state"] == "failed" and "exited with code 3" in status["error"]
    assert "hi there" in done.stderr


def test_version_is_the_package_version():
    import subprocess
    import sys

    import iris

    out = subprocess.run([sys.executable, "-m", "iris", "--version"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == f"iris {iris.__version__}"
    assert iris.__version__ not in ("", "0+unknown")


def test_address_after_the_verb_and_a_job_named_by_a_prefix(one_worker):
    ctx = one_worker
    job = iris.submit(["true"], name="prefix-me")
    job.wait(timeout=120)

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "iris", *argv], capture_output=True,
                              text=True, timeout=120)

    listed = cli("job", "list", "--json", "--address", ctx.address)
    assert listed.returncode == 0, listed.stderr
    assert job.job_id in {row["job_id"] for row in json.loads(listed.stdout)}
    by_name = cli("job", "status", "prefix-m", "--json", "--address", ctx.address)
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout)["job_id"] == job.job_id
    missing = cli("job", "status", "no-such-job", "--address", ctx.address)
    assert missing.returncode != 0 and "no job 'no-such-job'" in missing.stderr


def test_job_run_names_the_exit_code_and_ctrl_c_stops_the_job(one_worker):
    import signal

    ctx = one_worker
    failed = subprocess.run(
        [sys.executable, "-m", "iris", "job", "run", "--address", ctx.address, "--",
         "sh", "-c", "echo last words; exit 3"], capture_output=True, text=True, timeout=180)
    assert failed.returncode == 1
    assert "last words" in failed.stdout
    assert "failed: task 0: exited with code 3" in failed.stderr

    running = subprocess.Popen(
        [sys.executable, "-m", "iris", "job", "run", "--address", ctx.address, "--name",
         "sleepy", "--", "sh", "-c", "echo started; sleep 600"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL)
    assert running.stdout.readline().strip().endswith("started")
    running.send_signal(signal.SIGINT)
    _, err = running.communicate(timeout=120)
    assert running.returncode == 130 and "stopped /" in err
    job_id = err.split("stopped ")[1].split()[0]
    status = ctx.node.call(ctx.address, "/iris/controller", "status", (job_id,)).result(60)
    assert status["state"] == "killed"


def test_job_run_gang_options_out_of_bounds_are_refused_naming_the_field():
    env = {**ENV, "IRIS_ADDRESS": "tcp://127.0.0.1:1"}  # refused before any call is made
    for argv, text in ((["--tpu", "v4-16", "--count", "257"], "count: at most 256"),
                       (["--cpu", "1", "--hosts", "4"], "hosts=4: only a GPU job"),
                       (["--gpu", "H100", "--count", "8", "--hosts", "0"], "hosts: expected")):
        done = subprocess.run([sys.executable, "-m", "iris", "job", "run", *argv, "--", "true"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2 and text in done.stderr, (argv, done.stderr)
