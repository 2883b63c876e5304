"""Zygote fast starts: a forked child per callable attempt, isolated like any attempt."""

from __future__ import annotations

import os
import signal
import sys

import cloudpickle
import pytest

from iris.worker.outcome import OutcomeKind
from iris.worker.process import AttemptStartError
from iris.worker.records import is_alive
from iris.worker.zygote import ZygotePool, subprocess_callable_spawner

WAIT_S = 60.0
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the child cannot import tests


def _payload(fn, *args, **kwargs) -> bytes:
    return cloudpickle.dumps((fn, args, kwargs))


def report_identity():
    print(os.getpid(), os.getsid(0), os.getpgid(0), os.getcwd(), os.environ.get("MARK"),
          os.environ.get("IRIS_TASK_ID"), flush=True)


def fail_with(code):
    if code is None:
        raise RuntimeError("boom")
    sys.exit(code)


def wait_for_preemption():
    import time

    from iris.worker.task_runtime import on_preempt

    on_preempt(lambda: print("checkpoint saved", flush=True))
    print("ready", flush=True)
    time.sleep(600)


def hog_memory():
    x = bytearray(256 << 20)
    x[::4096] = b"1" * len(x[::4096])
    print("survived", flush=True)


def return_value(x):
    return {"double": 2 * x}


def return_when(path, code):
    import time

    print("ready", flush=True)
    while not os.path.exists(path):
        time.sleep(0.02)
    if code:
        sys.exit(code)
    return "done"


def sleep_forever():
    import time

    print("ready", os.getpid(), flush=True)
    time.sleep(600)


@pytest.mark.parametrize("path", ["zygote", "subprocess"])
def test_zygote_child_in_own_session_cwd_and_env(path, zygote, launch, lines):
    payload = _payload(report_identity)
    spawner = (zygote.spawner(payload) if path == "zygote"
               else subprocess_callable_spawner(sys.executable, payload))
    proc = launch(spawner, lines, env={"PATH": "/bin", "MARK": "job-env"})
    assert proc.wait(WAIT_S).ok, lines.items
    pid, sid, pgid, cwd, mark, task = lines.text()[0].split()
    assert int(pid) == int(sid) == int(pgid) == proc.pid
    assert cwd == str(proc.spec.cwd) and mark == "job-env" and task == "z"
    if path == "zygote":
        assert proc.pid != zygote.pid and os.getsid(zygote.pid) != proc.pid


@pytest.mark.parametrize("code, expected", [(None, 1), (7, 7)])
def test_zygote_failing_callable_exit_code(zygote, launch, lines, code, expected):
    outcome = launch(zygote.spawner(_payload(fail_with, code)), lines).wait(WAIT_S)
    assert outcome.kind is OutcomeKind.FAILED and outcome.exit_code == expected
    if code is None:
        assert any("RuntimeError: boom" in t for t in lines.text("stderr"))


def test_zygote_result_written_to_result_path(zygote, launch, tmp_path):
    result = tmp_path / "result.pkl"
    proc = launch(zygote.spawner(_payload(return_value, 21)),
                  env={"PATH": "/bin", "IRIS_RESULT_PATH": str(result)})
    assert proc.wait(WAIT_S).ok
    assert cloudpickle.loads(result.read_bytes()) == ("ok", {"double": 42})


def test_zygote_stop_runs_preempt_hook(zygote, launch, lines):
    proc = launch(zygote.spawner(_payload(wait_for_preemption)), lines)
    lines.wait_for(lambda t: t == "ready")
    outcome = proc.stop(grace_s=WAIT_S)
    assert outcome.kind is OutcomeKind.STOPPED and outcome.exit_code == 143, lines.items
    assert "checkpoint saved" in lines.text()
    assert zygote.alive


def test_zygote_attempt_over_memory_limit_is_oom_killed(zygote, launch, lines,
                                                        require_cgroups):
    proc = launch(zygote.spawner(_payload(hog_memory)), lines, memory_limit_bytes=64 << 20,
                  cgroups=require_cgroups)
    assert proc.wait(WAIT_S).kind is OutcomeKind.OOM_KILLED
    assert "survived" not in lines.text()
    assert zygote.alive


def test_zygote_death_leaves_attempt_running_then_stop_ends_it(zygote, launch, lines):
    proc = launch(zygote.spawner(_payload(sleep_forever)), lines)
    lines.wait_for(lambda t: t.startswith("ready"))
    os.kill(zygote.pid, signal.SIGKILL)
    assert proc.wait(0.5) is None  # no status yet: the attempt runs on
    assert is_alive(proc.pid)
    outcome = proc.stop(grace_s=WAIT_S)
    assert outcome.kind is OutcomeKind.UNKNOWN
    assert not is_alive(proc.pid)


@pytest.mark.parametrize("code,expected", [(0, OutcomeKind.SUCCEEDED),
                                           (3, OutcomeKind.FAILED)])
def test_zygote_death_then_the_attempt_exits_its_code_is_still_known(
        zygote, launch, lines, tmp_path, code, expected):
    """Init reaps an attempt whose zygote died, so no wait() can give its status; the task
    runtime leaves it in the attempt directory (task_runtime.record_exit). Before, it was
    UNKNOWN ("exit status unknown"), and a task that returned failed."""
    proc = launch(zygote.spawner(_payload(return_when, str(tmp_path / "go"), code)), lines)
    lines.wait_for(lambda t: t.startswith("ready"))
    os.kill(zygote.pid, signal.SIGKILL)
    (tmp_path / "go").touch()
    outcome = proc.wait(WAIT_S)
    assert (outcome.kind, outcome.exit_code) == (expected, code)


def test_a_zygote_that_does_not_answer_a_spawn_is_killed_and_replaced(launch, lines):
    """SIGSTOP a zygote: the attempt asked of it fails to start (after the spawn timeout,
    1 s here), the zygote is killed so that it can never fork that attempt later, and the
    pool's next attempt gets a new zygote. Before, the stopped one stayed and failed every
    attempt of its environment (30 s each) for as long as it was stopped."""
    pool = ZygotePool({"PATH": "/usr/bin:/bin"}, spawn_timeout_s=1.0)
    try:
        stopped = pool.get(sys.executable)
        os.kill(stopped.pid, signal.SIGSTOP)
        with pytest.raises(AttemptStartError, match="did not answer a spawn"):
            launch(stopped.spawner(_payload(return_value, 1)), lines)
        assert not stopped.alive
        again = pool.get(sys.executable)
        assert again is not stopped and not is_alive(stopped.pid)
        proc = launch(again.spawner(_payload(return_value, 2)), lines)
        assert proc.wait(WAIT_S).kind is OutcomeKind.SUCCEEDED
    finally:
        pool.close()


def test_zygote_in_job_environment_sees_job_packages(env_cache, launch, lines, tmp_path):
    from iris.worker.zygote import Zygote

    env = env_cache.get(["six==1.15.0"])
    z = Zygote(env.python, env.activate({"PATH": "/bin"}), preload=["six"])
    try:
        def show():
            import six
            print(six.__version__, flush=True)
        proc = launch(z.spawner(_payload(show)), lines)
        assert proc.wait(WAIT_S).ok, lines.items
        assert lines.text() == ["1.15.0"]
    finally:
        z.close()


def test_zygote_preload_that_starts_threads_is_refused(tmp_path):
    from iris.worker.zygote import Zygote, ZygoteError

    (tmp_path / "threaded_mod.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), "
        "daemon=True).start()\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    with pytest.raises(ZygoteError, match="did not start"):
        Zygote(sys.executable, env, preload=["threaded_mod"])


def test_bench_starts_quick_prints_json():
    import json
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "bench.starts", "--runs", "2", "--no-env"],
                         cwd=repo, capture_output=True, text=True, timeout=WAIT_S * 2)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["runs"] == 2 and result["start_zygote_median_ms"] > 0


def alternate_streams(n):
    import subprocess

    for i in range(n):
        print(f"out {i}")  # no flush: the runtime's line buffering must keep the order
        print(f"err {i}", file=sys.stderr)
    sys.stdout.write("tail without newline")
    # A child writing to the same fds directly (not through the runtime) still comes out.
    subprocess.run([sys.executable, "-c", "import os; os.write(1, b'raw child\\n')"],
                   check=True)


@pytest.mark.parametrize("path", ["zygote", "subprocess"])
def test_callable_stdout_and_stderr_reach_worker_in_written_order(path, zygote, launch,
                                                                  lines):
    payload = _payload(alternate_streams, 1000)
    spawner = (zygote.spawner(payload) if path == "zygote"
               else subprocess_callable_spawner(sys.executable, payload))
    proc = launch(spawner, lines)
    assert proc.wait(WAIT_S).ok, lines.items[-5:]
    got = [(stream, line.decode()) for stream, line in lines.items]
    want = [(s, f"{'out' if s == 'stdout' else 'err'} {i}\n") for i in range(1000) for s in ("stdout", "stderr")]
    assert got[:2000] == want
    assert sorted(got[2000:]) == [("stdout", "raw child\n"), ("stdout", "tail without newline")]
