"""A newcomer's first hour, as they would live it in a terminal: `iris cluster start --local`
in one shell, then `iris job run` in another: a job that succeeds, one that exits 3, one
that raises, an impossible request, Ctrl-C. Each test asserts on what the person reads."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from tests.conftest import ENV_CACHE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAIT_S = 240  # a job run includes a worker start-up on a loaded 2-core machine
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


class Terminal:
    """The second shell: `iris ...` with IRIS_ADDRESS exported, as the cluster told us."""

    def __init__(self, address: str):
        self.env = {**os.environ, "PYTHONPATH": ROOT, "IRIS_ADDRESS": address}

    def iris(self, *args: str, timeout: float = WAIT_S) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "iris", *args], capture_output=True,
                              text=True, env=self.env, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "iris", *args], text=True,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def started():
    """`iris cluster start --local` in its own shell; what it printed, and a terminal."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "iris", "cluster", "start", "--local", "--workers", "2",
         "--dashboard-port", "0"], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # A newcomer has no machine-wide environment cache: the cluster's own, cold, so its
        # first job with `--pip` builds and shows it (the suite's shared one may hold it).
        env={**{k: v for k, v in os.environ.items() if k != ENV_CACHE}, "PYTHONPATH": ROOT},
        stdin=subprocess.DEVNULL)
    printed: list[str] = []
    done = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            printed.append(line.rstrip("\n"))
            if line.lstrip().startswith("try:"):
                done.set()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert done.wait(WAIT_S) and printed, proc.stderr.read() if proc.poll() else "silent"
        address = printed[0].split()[3]
        yield printed, Terminal(address)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C in the first shell
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_newcomer_cluster_start_says_where_it_is_and_what_each_worker_offers(started):
    printed, term = started
    assert re.match(r"cluster running at tcp://127\.0\.0\.1:\d+ with 2 workers \(each offers "
                    r"cpu=\d+ memory=[\d.]+ [KMGT]iB\)$", printed[0]), printed
    assert printed[1].strip().startswith("export IRIS_ADDRESS=tcp://")
    assert "dashboard: http://127.0.0.1:" in printed[2]
    assert printed[-1].strip().startswith("try: iris job run -- ")
    workers = json.loads(term.iris("worker", "list", "--json").stdout)
    cpus = len(os.sched_getaffinity(0))
    # The machine shared between the two workers, not 8 CPUs each on a 2-core machine.
    assert sum(w["cpu"] for w in workers) == 2 * max(1, cpus // 2)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert sum(w["memory_bytes"] for w in workers) <= memory


def test_newcomer_job_that_succeeds_prints_its_lines_then_its_state(started):
    _, term = started
    done = term.iris("job", "run", "--name", "hello", "--", "python", "-c",
                     "import sys; print('hello world'); print('careful', file=sys.stderr)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[task 0/attempt 0] hello world",
                                        "[task 0/attempt 0 stderr] careful"]
    assert done.stderr.strip().splitlines()[-1].endswith(": succeeded")
    status = term.iris("job", "status", "hello")
    assert re.search(r"submitted \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, finished ", status.stdout)
    listed = term.iris("job", "list").stdout.splitlines()
    assert listed[0].split()[:4] == ["JOB_ID", "STATE", "PRIORITY", "SUBMITTED"]


def test_newcomer_job_that_exits_3_names_the_code(started):
    _, term = started
    done = term.iris("job", "run", "--", "sh", "-c", "echo last words; exit 3")
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["[task 0/attempt 0] last words"]
    assert "failed: task 0: exited with code 3" in done.stderr.strip().splitlines()[-1]


def test_newcomer_command_that_raises_shows_the_traceback_and_the_code(started):
    _, term = started
    done = term.iris("job", "run", "--", "python", "-c",
                     "def step():\n    raise ValueError('bad gradient')\nstep()")
    assert done.returncode == 1
    assert "[task 0/attempt 0 stderr] ValueError: bad gradient" in done.stdout
    assert "in step" in done.stdout  # the traceback, with the user's own frame
    assert "exited with code 1" in done.stderr.strip().splitlines()[-1]
    assert "/sys/fs/cgroup" not in done.stdout + done.stderr


def test_newcomer_python_task_that_raises_gives_its_own_exception(started, tmp_path):
    _, term = started
    script = tmp_path / "first.py"
    script.write_text(textwrap.dedent("""
        import iris

        class BadGradient(Exception):
            pass

        def train(step):
            raise BadGradient(f"gradient exploded at step {step}")

        iris.connect()
        job = iris.submit(train, 7, name="train")
        try:
            job.result()
        except BadGradient as exc:
            print("caught", type(exc).__name__, exc)
            print("remote frames:", "in train" in exc.remote_traceback)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=term.env, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert "caught BadGradient gradient exploded at step 7" in done.stdout
    assert "remote frames: True" in done.stdout


def test_newcomer_impossible_request_is_refused_at_once_and_leaves_nothing(started):
    _, term = started
    before = json.loads(term.iris("job", "list", "--json").stdout)
    done = term.iris("job", "run", "--memory", "10TiB", "--", "echo", "x")
    assert done.returncode == 2 and done.stdout == ""
    assert "memory=10 TiB" in done.stderr and "largest" in done.stderr, done.stderr
    assert not re.search(r"\d{10,}", done.stderr)  # no raw byte counts
    assert json.loads(term.iris("job", "list", "--json").stdout) == before


def test_newcomer_ctrl_c_stops_the_job_and_says_so(started):
    _, term = started
    run = term.popen("job", "run", "--name", "sleepy", "--", "sh", "-c",
                     "echo started; sleep 600")
    assert run.stdout.readline().strip() == "[task 0/attempt 0] started"
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=WAIT_S)
    assert run.returncode == 130
    job_id = re.search(r"iris: stopped (\S+)", err).group(1)
    status = json.loads(term.iris("job", "status", job_id, "--json").stdout)
    assert status["state"] == "killed"


def test_newcomer_ctrl_c_with_detach_leaves_it_and_says_how_to_follow(started):
    _, term = started
    run = term.popen("job", "run", "--detach-on-interrupt", "--name", "keeper", "--", "sh",
                     "-c", "echo started; sleep 600")
    assert run.stdout.readline().strip() == "[task 0/attempt 0] started"
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=WAIT_S)
    assert run.returncode == 130
    follow = re.search(r"iris job logs -f (\S+);", err)
    assert follow, err
    job_id = follow.group(1)
    assert json.loads(term.iris("job", "status", job_id, "--json").stdout)["state"] in (
        "running", "building")
    stopped = term.iris("job", "stop", job_id)
    assert stopped.returncode == 0 and f"killed {job_id}" in stopped.stdout


def test_newcomer_logs_read_in_order_with_timestamps_on_request(started):
    _, term = started
    # Each line waits until the worker read its pipe, so the order written is a fact.
    code = textwrap.dedent("""
        import fcntl, struct, sys, termios
        def say(text, stream, fd):
            print(text, file=stream, flush=True)
            while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, bytes(4)))[0]:
                pass
        for i in range(5):
            say(f"out {i}", sys.stdout, 1)
            say(f"err {i}", sys.stderr, 2)
    """)
    run = term.iris("job", "run", "--name", "chatty", "--no-wait", "--json", "--", "python",
                    "-c", code)
    job_id = json.loads(run.stdout)["job_id"]
    assert term.iris("job", "logs", "-f", job_id).returncode == 0  # until it ends
    plain = term.iris("job", "logs", "chatty").stdout.splitlines()
    assert [ln.split("] ", 1)[1] for ln in plain] == [
        f"{s} {i}" for i in range(5) for s in ("out", "err")]
    stamped = term.iris("job", "logs", "chatty", "--timestamps").stdout.splitlines()
    assert all(re.match(ISO + r" \[task 0/attempt 0( stderr)?\] (out|err) \d$", ln)
               for ln in stamped), stamped
    as_json = [json.loads(ln) for ln in term.iris("job", "logs", "chatty", "--json")
               .stdout.splitlines()]
    assert {"ts", "time", "stream", "task", "attempt", "text"} <= set(as_json[0])
    assert re.fullmatch(ISO, as_json[0]["time"]) and as_json[1]["stream"] == "stderr"


def test_newcomer_environment_build_output_is_kept_apart(started):
    _, term = started
    done = term.iris("job", "run", "--name", "withpip", "--pip", "six==1.16.0", "--", "python",
                     "-c", "import six; print('six', six.__version__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[task 0/attempt 0] six 1.16.0"]  # no uv chatter
    build = term.iris("job", "logs", "withpip", "--build-logs")
    assert build.returncode == 0 and build.stdout.strip(), build.stderr
    assert all(" build] " in ln for ln in build.stdout.splitlines())
