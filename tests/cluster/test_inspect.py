"""Looking inside running jobs on a local cluster, through the CLI a user types: what a task
used (`iris job summary`), its stacks and a profile (`iris task stack|profile`), a command
in its environment (`iris task exec`), its named ports (`iris job url`); and every bad
request answered with one line naming it, exit 2, nothing changed. One cluster for the
module; each task is a command that says when it is ready by writing a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

import iris
from iris.actors import tokens
from iris.actors.keys import CONTROLLER_KEY, worker_inspect_key
from iris.base.errors import PermissionDeniedError
from iris.client import inspect
from tests.conftest import ROOT, as_current

pytestmark = pytest.mark.slow
WAIT_S = 120.0  # a loaded 2-core machine: starting a task can take many seconds

# Sleeps in a function with a name to look for, in the main thread and 3 more, after
# holding MIB MiB resident; writes READY when all of it is done.
SLEEPER = textwrap.dedent("""
    import pathlib, sys, threading, time
    def known_function_sleeping():
        time.sleep(600)
    buf = bytearray({mib} << 20)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    for _ in range(3):
        threading.Thread(target=known_function_sleeping, daemon=True).start()
    pathlib.Path(sys.argv[1]).write_text(sys.prefix)
    known_function_sleeping()
""")
BURNER = textwrap.dedent("""
    import pathlib, sys, time
    def burn_in_a_known_function(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sum(range(1000))
    pathlib.Path(sys.argv[1]).write_text("ready")
    burn_in_a_known_function(float(sys.argv[2]))
""")
SERVER = textwrap.dedent("""
    import http.server, os, pathlib, sys
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = ("hello from " + os.environ["IRIS_JOB_ID"]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    server = http.server.HTTPServer(("127.0.0.1", int(os.environ["IRIS_PORT_HTTP"])), Hello)
    pathlib.Path(sys.argv[1]).write_text(os.environ["IRIS_PORT_HTTP"])
    server.serve_forever()
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    os.environ["IRIS_USAGE_INTERVAL_S"] = "0.5"  # its workers inherit it: readings often
    try:
        with iris.local_cluster(workers=1, worker_cpu=8, stop_grace_s=1.0,
                                state_dir=tmp_path_factory.mktemp("inspect")) as ctx:
            yield ctx
    finally:
        os.environ.pop("IRIS_USAGE_INTERVAL_S", None)


@pytest.fixture
def on(cluster):
    with as_current(cluster):
        yield cluster


def shell(cluster, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`iris ARGV` as a user runs it, in its own process (for its real exit code)."""
    return subprocess.run([sys.executable, "-m", "iris", "--address", cluster.address, *argv],
                          capture_output=True, text=True, timeout=WAIT_S,
                          env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})


@pytest.fixture
def cli(capsysbinary):
    """`iris ARGV` run here (the same main, without a new interpreter each time): the
    exit code and what it printed."""
    from iris.actors.current import current_context
    from iris.cli.main import main

    def run(cluster, *argv: str) -> subprocess.CompletedProcess:
        token = current_context.set(current_context.get())  # main() joins the cluster anew
        try:
            code = main(["--address", cluster.address, *argv])
        finally:
            current_context.reset(token)
        out, err = capsysbinary.readouterr()
        return subprocess.CompletedProcess(argv, code, out.decode(), err.decode())
    return run


def started(code: str, ready: Path, *args: str, wait_until=None, **submit) -> iris.JobHandle:
    job = iris.submit(["python", "-c", code, str(ready), *args], **submit)
    wait_until(lambda: ready.exists() or job.status()["state"] in ("failed", "killed"),
               WAIT_S, f"{job.job_id} to be ready")
    assert ready.exists(), job.status()
    # The process runs before its worker's "running" report reaches the controller, and a
    # stack, profile or exec asks the controller, which answers from what it was told.
    wait_until(lambda: _all_running(job), WAIT_S,
               f"the controller to see {job.job_id} running")
    return job


def _all_running(job: iris.JobHandle) -> bool:
    tasks = job.status().get("tasks") or []
    return bool(tasks) and all(t.get("state") == "running" for t in tasks)


def test_memory_a_task_holds_shows_in_its_summary_and_series(on, tmp_path, wait_until, cli):
    job = started(SLEEPER.format(mib=120), tmp_path / "ready", name="holds",
                  resources=iris.Resources(memory="512MiB"), wait_until=wait_until)
    try:
        got = wait_until(lambda: _rss_seen(job.job_id, 120 << 20), WAIT_S,
                         "a reading of the 120 MiB")
        assert got["request"]["memory_bytes"] == 512 << 20
        row = got["tasks"][0]["attempts"][0]
        assert row["peak_rss_bytes"] >= 120 << 20 and row["live"]
        shown = cli(on, "job", "summary", job.job_id)
        assert shown.returncode == 0, shown.stderr
        assert "of 512 MiB" in shown.stdout and "running" in shown.stdout
    finally:
        job.kill()
    ended = wait_until(lambda: _final(job.job_id), WAIT_S, "the totals sent with its end")
    assert ended["peak_rss_bytes"] >= 120 << 20 and ended["cpu_s"] > 0


def _rss_seen(job_id: str, at_least: int) -> dict | None:
    got = inspect.job_summary(job_id)
    series = got["tasks"][0]["series"]
    return got if series and max(p["rss_bytes"] for p in series) >= at_least else None


def _final(job_id: str) -> dict | None:
    row = inspect.job_summary(job_id)["tasks"][0]["attempts"][-1]
    return row if row["usage_final"] else None


def test_a_task_killed_for_memory_is_named_so(on, require_cgroups, wait_until, cli):
    job = iris.submit(["python", "-c", "b = bytearray(600 << 20)\nfor i in range(0, len(b), "
                       "4096): b[i] = 1"], name="greedy", max_retries_failure=0,
                      resources=iris.Resources(memory="64MiB"))
    job.wait(WAIT_S)
    row = wait_until(lambda: _final(job.job_id), WAIT_S, "its totals")
    assert row["killed_for_memory"] and row["ended"] == "killed for memory (OOM in its cgroup)"
    assert row["peak_memory_bytes"] >= 60 << 20
    shown = cli(on, "job", "summary", job.job_id)
    assert "killed for memory" in shown.stdout and "1 killed for memory" in shown.stdout
    as_json = json.loads(cli(on, "job", "summary", job.job_id, "--json").stdout)
    assert as_json["totals"]["killed_for_memory"] == 1


@pytest.fixture
def require_cgroups():
    from iris.worker.cgroups import detect

    if detect() is None:
        pytest.skip("no writable memory cgroup here: memory limits are not enforced")


def test_stack_of_a_sleeping_task_shows_the_function_it_sleeps_in(on, tmp_path, wait_until, cli):
    job = started(SLEEPER.format(mib=1), tmp_path / "ready", name="sleeper",
                  wait_until=wait_until)
    try:
        shown = cli(on, "task", "stack", f"{job.job_id}/0")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count("known_function_sleeping") >= 4  # main + 3 threads
        as_json = json.loads(cli(on, "task", "stack", job.job_id, "--json").stdout)
        [proc] = [p for p in as_json["processes"] if p["python"]]
        assert "known_function_sleeping" in proc["text"] and as_json["task_index"] == 0
        os.kill(proc["pid"], signal.SIGSTOP)  # stopped: py-spy cannot pause it, reads anyway
        try:
            stopped = inspect.task_stack(job.job_id)["processes"]
            assert "known_function_sleeping" in stopped[0]["text"], stopped
        finally:
            os.kill(proc["pid"], signal.SIGCONT)
    finally:
        job.kill()


def test_exec_runs_in_the_tasks_environment_for_its_owner_and_is_recorded(on, tmp_path,
                                                                          wait_until, cli):
    ready = tmp_path / "ready"
    job = started(SLEEPER.format(mib=1), ready, name="execd", wait_until=wait_until)
    try:
        shown = cli(on, "task", "exec", job.job_id, "--", "python", "-c",
                    "import os, sys; print(sys.prefix); print(os.environ['IRIS_JOB_ID'])")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.split() == [ready.read_text(), job.job_id]  # the task's own venv
        seven = shell(on, "task", "exec", job.job_id, "--", "sh", "-c", "echo out; echo err "
                      ">&2; exit 7")
        assert (seven.returncode, seven.stdout, seven.stderr) == (7, "out\n", "err\n")
        refused = shell(on, "task", "exec", job.job_id, "--", "id",
                        env={"IRIS_USER": "mallory"})
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert "only its owner" in refused.stderr and "mallory" in refused.stderr
        admin = Path(iris.current().node.call(on.address, CONTROLLER_KEY, "state_dir")
                     .result(30)) / tokens.ADMIN_TOKEN_FILE
        operator = shell(on, "task", "exec", job.job_id, "--admin-token-file", str(admin),
                         "--", "true", env={"IRIS_USER": "oscar"})
        assert operator.returncode == 0, operator.stderr
        events = inspect.job_summary(job.job_id)["events"]
        assert [(e["user"], e["operator"]) for e in events] == [
            (os.environ.get("IRIS_USER") or _me(), False)] * 2 + [("oscar", True)]
        assert "sys.prefix" in events[0]["command"]
    finally:
        job.kill()


def _me() -> str:
    import getpass

    return getpass.getuser()


def test_profile_names_the_hot_function_and_a_task_ending_early_gives_a_partial_one(
        on, tmp_path, wait_until, cli):
    job = started(BURNER, tmp_path / "ready", "600", name="burner", wait_until=wait_until)
    try:
        out = tmp_path / "p.svg"
        shown = cli(on, "task", "profile", job.job_id, "--seconds", "2", "--format", "svg",
                    "-o", str(out))
        assert shown.returncode == 0, shown.stderr
        assert "burn_in_a_known_function" in out.read_text() and "<svg" in out.read_text()
        speed = tmp_path / "p.json"
        cli(on, "task", "profile", job.job_id, "--seconds", "1", "-o", str(speed))
        frames = json.loads(speed.read_text())["shared"]["frames"]
        assert any("burn_in_a_known_function" in f["name"] for f in frames)
    finally:
        job.kill()
    short = started(BURNER, tmp_path / "ready2", "2", name="brief", wait_until=wait_until)
    got = inspect.task_profile(short.job_id, seconds=20)
    assert got["ended_early"] and "partial" in got["note"]
    assert "burn_in_a_known_function" in got["folded"]


def test_a_named_port_reaches_the_task_and_job_url_prints_where(on, tmp_path, wait_until, cli):
    ready = tmp_path / "ready"
    job = started(SERVER, ready, name="web", resources=iris.Resources(ports=["http", "tb"]),
                  wait_until=wait_until)
    try:
        shown = cli(on, "job", "url", job.job_id, "http")
        assert shown.returncode == 0, shown.stderr
        url = shown.stdout.strip()
        assert url.endswith(f":{ready.read_text()}/")  # the port the task was given
        with urllib.request.urlopen(url, timeout=30) as reply:
            assert reply.read().decode() == f"hello from {job.job_id}"
        other = json.loads(cli(on, "job", "url", job.job_id, "tb", "--json").stdout)
        assert other["port"] != int(ready.read_text())  # each name its own port
        never = cli(on, "job", "url", job.job_id, "metrics")
        assert never.returncode == 2 and "asked for no port named 'metrics'" in never.stderr
    finally:
        job.kill()


def test_bad_requests_are_one_line_naming_them_and_change_nothing(on, tmp_path, wait_until, cli):
    done = iris.submit(["true"], name="finished")
    done.wait(WAIT_S)
    for argv, said in [
            (("task", "stack", "no-such-job"), "no job 'no-such-job'"),
            (("task", "stack", done.job_id), "is succeeded: nothing of it runs"),
            (("task", "stack", f"{done.job_id}/5"), "has no task 5"),
            (("task", "profile", done.job_id, "--seconds", "601"), "at most 600"),
            (("job", "url", done.job_id, "http"), "asked for no port named 'http'"),
            (("task", "exec", done.job_id, "--"), "give the command after --")]:
        shown = cli(on, *argv)
        assert shown.returncode == 2, (argv, shown)
        assert shown.stderr.startswith("iris: ") and shown.stderr.count("\n") == 1, shown.stderr
        assert said in shown.stderr, (argv, shown.stderr)
    assert inspect.job_summary(done.job_id)["events"] == []


def test_only_the_controller_may_ask_a_workers_inspector_and_only_operators_exec_as_one(
        cluster):
    worker = cluster.node.call(cluster.address, CONTROLLER_KEY, "list_workers").result(30)[0]
    with iris.connect(cluster.address) as stranger:  # a client node: no token
        node = stranger.node
        with pytest.raises(PermissionDeniedError, match="not permitted"):
            node.call(worker["address"], worker_inspect_key(worker["worker_id"]), "stack",
                      ("att-x",)).result(30)
        with pytest.raises(PermissionDeniedError, match="not permitted"):
            node.call(cluster.address, CONTROLLER_KEY, "inspect_target",
                      ({"job_id": "/x/y", "kind": "stack"},)).result(30)
        from iris.actors.keys import INSPECT_KEY

        with pytest.raises(PermissionDeniedError, match="not permitted"):
            node.call(cluster.address, INSPECT_KEY, "task_exec_as_operator",
                      ({"job_id": "/x/y", "argv": ["id"], "user": "root"},)).result(30)
