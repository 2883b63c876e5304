"""AttemptRunner: fencing, admission, environments, bundles and recovery put together."""

from __future__ import annotations

import sys
import threading

import cloudpickle
import pytest

from iris.base.errors import ConflictError, IrisError, StaleAttemptError
from iris.base.resources import Resources
from iris.wire.bundles import pack
from iris.worker.adoption import LeftoverAction
from iris.worker.capacity import CapacityExceededError
from iris.worker.envs import EnvironmentBuildError
from iris.worker.outcome import OutcomeKind
from iris.worker.records import RECORD_NAME, is_alive
from iris.worker.runner import AttemptRequest, AttemptRunner, AttemptState, RunnerConfig

WAIT_S = 120.0
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def six_version():
    import six
    return six.__version__


def preemptible():
    import time

    from iris.worker.task_runtime import on_preempt
    on_preempt(lambda: print("checkpoint saved", flush=True))
    print("ready", flush=True)
    time.sleep(600)


def _payload(fn):
    return cloudpickle.dumps((fn, (), {}))


@pytest.fixture
def make_runner(tmp_path, env_cache, cgroup_host):
    runners = []

    def make(advertised=Resources(cpu=4, memory="4GB"), root=None, **kw):
        config = RunnerConfig(root=root or tmp_path / "worker", grace_s=WAIT_S,
                              env_config=env_cache.config)
        runner = AttemptRunner(config, advertised, cgroups=cgroup_host, **kw)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()


def test_runner_callable_with_pip_returns_result_in_its_env(make_runner):
    runner, states, results = make_runner(), [], []

    def on_exit(proc, outcome):
        results.append((outcome, cloudpickle.loads(
            (proc.spec.attempt_dir / "result.pkl").read_bytes())))

    proc = runner.start(AttemptRequest("job/t0", 0, payload=_payload(six_version),
                                       pip=("six==1.15.0",)),
                        on_state=states.append, on_exit=on_exit)
    assert proc.wait(WAIT_S).ok
    assert results[0][1] == ("ok", "1.15.0")
    assert states[0] is AttemptState.BUILDING and states[-1] is AttemptState.RUNNING
    assert runner.running() == {} and runner.free()["cpu"] == 4
    assert not proc.spec.attempt_dir.exists()


def test_runner_env_build_output_is_its_own_stream_not_the_tasks(make_runner, lines):
    runner = make_runner()
    proc = runner.start(AttemptRequest("job/build", 0, command=("python", "-c",
                                       "import six; print('task says', six.__version__)"),
                                       pip=("six==1.14.0",)), on_output=lines)
    assert proc.wait(WAIT_S).ok
    assert lines.text("stdout") == ["task says 1.14.0"]
    assert lines.text("stderr") == []  # uv's chatter is not the task's stderr
    assert any("virtual environment" in line for line in lines.text("build")), lines.items


def test_runner_command_runs_in_bundle_with_bundle_requirements(make_runner, tmp_path, lines):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.py").write_text("import six; print(six.__version__, open('data.txt').read())")
    (ws / "data.txt").write_text("payload")
    (ws / "requirements.txt").write_text("six==1.16.0\n")
    digest, data = pack(ws)
    runner = make_runner(fetch_bundle={digest: data}.__getitem__)
    proc = runner.start(AttemptRequest("t", 0, command=("python", "main.py"), bundle=digest),
                        on_output=lines)
    assert proc.wait(WAIT_S).ok, lines.items
    assert lines.text() == ["1.16.0 payload"]


def test_runner_newer_attempt_stops_older_first_and_fences_it(make_runner, lines):
    runner = make_runner()
    old = runner.start(AttemptRequest("t", 0, payload=_payload(preemptible)), on_output=lines)
    lines.wait_for(lambda t: t == "ready")
    new = runner.start(AttemptRequest("t", 1, command=("true",)))
    assert old.done and old.wait(0).kind is OutcomeKind.STOPPED
    assert "checkpoint saved" in lines.text()
    with pytest.raises(StaleAttemptError):
        runner.stop("t", 0)
    with pytest.raises(StaleAttemptError):
        runner.start(AttemptRequest("t", 0, command=("true",)))
    assert new.wait(WAIT_S).ok


def test_runner_over_capacity_refused_nothing_changes(make_runner, lines):
    runner = make_runner(advertised=Resources(cpu=1))
    runner.start(AttemptRequest("a", 0, payload=_payload(preemptible)), on_output=lines)
    with pytest.raises(CapacityExceededError, match="cpu"):
        runner.start(AttemptRequest("b", 0, command=("true",)))
    assert runner.running() == {"a": [0]}
    lines.wait_for(lambda t: t == "ready")
    assert runner.stop("a", 0).kind is OutcomeKind.STOPPED
    assert runner.start(AttemptRequest("b", 0, command=("true",))).wait(WAIT_S).ok


def test_runner_failed_build_reports_uv_text_and_releases(make_runner):
    runner = make_runner()
    with pytest.raises(EnvironmentBuildError, match="six==0.0.999"):
        runner.start(AttemptRequest("t", 0, command=("true",), pip=("six==0.0.999",)))
    assert runner.running() == {} and runner.free()["cpu"] == 4
    with pytest.raises(ConflictError):  # a retry is a new attempt number
        runner.start(AttemptRequest("t", 0, command=("true",)))


def test_runner_restart_kills_what_previous_runner_left(make_runner, tmp_path, lines):
    first = make_runner()
    proc = first.start(AttemptRequest("t", 0, command=("sleep", "600")))
    restarted = make_runner(root=first.config.root)
    leftovers = restarted.recover(adopt=False)
    assert [x.action for x in leftovers] == [LeftoverAction.KILLED]
    assert proc.wait(WAIT_S) is not None and not is_alive(proc.pid)
    assert list(restarted.attempts_root.iterdir()) == []


def test_runner_restart_kills_an_attempt_that_had_no_record_yet(make_runner):
    """The worker died after the spawn, before the attempt's record: the restarted one
    finds the process through its cgroup or its announcement (halfborn.py), not only
    removes the directory. Before, the process ran on, unrecorded, beside the retry."""
    first = make_runner()
    proc = first.start(AttemptRequest("t", 0, command=("sleep", "600")))
    (proc.spec.attempt_dir / RECORD_NAME).unlink()
    restarted = make_runner(root=first.config.root)
    assert restarted.recover(adopt=False) == []
    assert proc.wait(WAIT_S) is not None and not is_alive(proc.pid)
    assert list(restarted.attempts_root.iterdir()) == []


def test_runner_restart_adopts_running_attempt(make_runner, lines):
    first = make_runner()
    proc = first.start(AttemptRequest("t", 0, command=("sleep", "600"),
                                      resources=Resources(cpu=2)))
    restarted = make_runner(root=first.config.root)
    leftovers = restarted.recover(adopt=True)
    assert [x.action for x in leftovers] == [LeftoverAction.ADOPTED]
    assert restarted.running() == {"t": [0]} and restarted.free()["cpu"] == 2
    assert restarted.stop("t", 0, grace_s=WAIT_S).kind in (OutcomeKind.UNKNOWN,
                                                           OutcomeKind.STOPPED)
    assert not is_alive(proc.pid) and restarted.running() == {}


def test_runner_bad_request_refused(make_runner):
    runner = make_runner()
    with pytest.raises(Exception, match="exactly one"):
        runner.start(AttemptRequest("t", 0))
    assert runner.running() == {}


def test_runner_closed_while_a_start_is_preparing_never_launches_it(make_runner, tmp_path):
    """The worker stops while an attempt's bundle (or environment) is still being fetched:
    the attempt must not start afterwards, a process nobody would ever stop."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.py").write_text("import time; time.sleep(600)")
    digest, data = pack(ws)
    fetching, release = threading.Event(), threading.Event()

    def slow_fetch(wanted: str) -> bytes:
        fetching.set()
        release.wait(WAIT_S)
        return data

    runner = make_runner(fetch_bundle=slow_fetch)
    refused: list[BaseException] = []

    def start() -> None:
        try:
            runner.start(AttemptRequest("job/late", 0, command=("python", "main.py"),
                                        bundle=digest))
        except IrisError as exc:
            refused.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    assert fetching.wait(WAIT_S)
    runner.close()  # nothing runs yet: returns at once
    release.set()
    starting.join(WAIT_S)
    assert refused and "the worker is stopping" in str(refused[0])
    assert runner.running() == {}


def test_envs_linked_to_a_shared_cache_are_kept_by_their_real_path(tmp_path):
    """A Slurm slice's work dir links `envs` to the node's cache, which outlives the slice:
    venvs (absolute paths in their scripts and .pth) must name the cache, not the link, or
    they break once the first slice's dir is removed (found by bench.slurm's 18th run)."""
    shared = tmp_path / "cache"
    shared.mkdir()
    work = tmp_path / "slice-1" / "n1"
    work.mkdir(parents=True)
    (work / "envs").symlink_to(shared)
    runner = AttemptRunner(RunnerConfig(root=work), Resources(cpu=1, memory=1 << 30))
    try:
        assert runner.envs.config.root == shared.resolve()
    finally:
        runner.close()
