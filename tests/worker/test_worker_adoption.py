"""A restarted worker adopts or kills what its previous life left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from iris.worker.adoption import LeftoverAction, adopt_or_kill, adopt_or_kill_all
from iris.worker.outcome import OutcomeKind
from iris.worker.process import PidfdLeader
from iris.worker.records import AttemptRecord, is_alive

PYTHON = sys.executable
WAIT_S = 60.0

# Prints, then blocks opening go.fifo until the test opens it, then prints again: so the
# second line is written while no worker is alive to read it.
TASK = textwrap.dedent("""
    import os, time
    print("before", flush=True)
    open("go.fifo").close()
    print("after", os.getpid(), flush=True)
    time.sleep(600)
""")

OLD_WORKER = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from iris.worker.cgroups import detect
    from iris.worker.process import AttemptProcess, AttemptSpec
    root, use_cgroups, task = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
    spec = AttemptSpec(task_id="t", attempt=0, attempt_dir=root / "attempts" / "a0", cwd=root,
                       env={"PATH": "/usr/bin:/bin"}, memory_limit_bytes=256 << 20)
    proc = AttemptProcess.start(spec, [sys.executable, "-c", task],
                                cgroups=detect() if use_cgroups else None)
    print(proc.pid, flush=True)
    threading.Event().wait()
""")


@pytest.fixture
def orphaned_attempt(tmp_path, cgroup_host):
    """An attempt whose worker was killed with SIGKILL: (attempt dir, task pid)."""
    os.mkfifo(tmp_path / "go.fifo")
    old = subprocess.Popen(
        [PYTHON, "-c", OLD_WORKER, str(tmp_path), "1" if cgroup_host else "0", TASK],
        stdout=subprocess.PIPE, text=True)
    task_pid = int(old.stdout.readline())
    old.kill()
    old.wait()
    old.stdout.close()
    attempt_dir = tmp_path / "attempts" / "a0"
    yield attempt_dir, task_pid
    if is_alive(task_pid):
        os.killpg(task_pid, signal.SIGKILL)


def _release(tmp_path):
    with open(tmp_path / "go.fifo", "w"):
        pass  # blocks until the task opens its end: no polling


def test_adoption_running_attempt_is_adopted_output_survives_restart(orphaned_attempt, lines,
                                                                      tmp_path):
    attempt_dir, task_pid = orphaned_attempt
    assert is_alive(task_pid)
    _release(tmp_path)  # the task writes "after" while no worker is reading
    leftover = adopt_or_kill(attempt_dir, adopt=True, on_output=lines)
    assert leftover.action is LeftoverAction.ADOPTED
    assert lines.wait_for(lambda t: t.startswith("after")) == f"after {task_pid}"
    outcome = leftover.process.stop(grace_s=WAIT_S)
    assert outcome.kind is OutcomeKind.UNKNOWN
    assert not is_alive(task_pid)
    assert AttemptRecord.read(attempt_dir) is None


def test_adoption_kill_policy_kills_attempt_and_cleans_up(orphaned_attempt, cgroup_host):
    attempt_dir, task_pid = orphaned_attempt
    record = AttemptRecord.read(attempt_dir)
    leftover = adopt_or_kill(attempt_dir, adopt=lambda r: False)
    assert leftover.action is LeftoverAction.KILLED
    assert not is_alive(task_pid)
    assert AttemptRecord.read(attempt_dir) is None
    if record.cgroup:
        assert not os.path.exists(record.cgroup)


def test_adoption_dead_attempt_reported_gone(orphaned_attempt, tmp_path):
    attempt_dir, task_pid = orphaned_attempt
    os.killpg(task_pid, signal.SIGKILL)
    PidfdLeader(task_pid).wait_returncode()  # returns once it has died
    leftovers = adopt_or_kill_all(attempt_dir.parent, adopt=True)
    assert [x.action for x in leftovers] == [LeftoverAction.GONE]
    assert AttemptRecord.read(attempt_dir) is None


def test_adoption_nothing_left_returns_none(tmp_path):
    assert adopt_or_kill(tmp_path, adopt=True) is None
    assert adopt_or_kill_all(tmp_path / "missing", adopt=True) == []


def test_adoption_worker_died_before_record_cgroup_swept(tmp_path, require_cgroups):
    from iris.base.ids import new_id
    from iris.worker.cgroups import join_then_exec_argv
    from iris.worker.process import PENDING_CGROUP_NAME

    cgroup = require_cgroups.create(f"iris-{new_id()}")
    argv = join_then_exec_argv(cgroup.procs_file, ["sh", "-c", "echo joined; exec sleep 600"])
    orphan = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert orphan.stdout.readline() == b"joined\n"  # it is in the cgroup now
        (tmp_path / PENDING_CGROUP_NAME).write_text(str(cgroup.path))
        assert adopt_or_kill(tmp_path, adopt=True) is None
        assert orphan.wait(WAIT_S) == -signal.SIGKILL
        assert not cgroup.path.exists()
        assert not (tmp_path / PENDING_CGROUP_NAME).exists()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
        orphan.stdout.close()
        cgroup.remove()
