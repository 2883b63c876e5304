"""A launch that fails leaves no process of its attempt (iris/worker/halfborn.py): not the
child a zygote forked just before it froze, not a command started before its record failed."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from iris.worker.process import AttemptStartError, popen_spawner
from iris.worker.records import RECORD_NAME, is_alive
from iris.worker.zygote import ZygotePool

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the child cannot import tests

# Preloaded by the zygote: it stops itself between a fork and its "started" reply. With
# LATE, the child first waits until the worker has given up on the launch (marked it).
_FREEZE_AFTER_FORK = '''
import glob, os, signal, time
LATE = {late}
_fork = os.fork
def _fork_then_freeze():
    pid = _fork()
    if pid:
        os.kill(os.getpid(), signal.SIGSTOP)
    elif LATE:
        deadline = time.monotonic() + 20
        while not glob.glob({marks!r}) and time.monotonic() < deadline:
            time.sleep(0.02)
    return pid
os.fork = _fork_then_freeze
'''


def touch_then_sleep(path):
    open(path, "w").close()
    time.sleep(600)


def _processes_running(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (a zygote and its forked children
    share their command line)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and is_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _wait_gone(marker: str) -> list[int]:
    deadline = time.monotonic() + 10.0  # the killed zygote may take a moment to go
    while (left := _processes_running(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("with_cgroup", [False, True])
@pytest.mark.parametrize("late", [False, True], ids=["child-ran", "child-late"])
def test_a_child_forked_just_before_its_zygote_froze_does_not_outlive_the_failed_spawn(
        late, with_cgroup, cgroup_host, launch, lines, tmp_path):
    """The zygote forks the attempt, then freezes before it can say so: the spawn times out
    and the attempt fails to start. Its child must not run on unrecorded (the task would be
    retried beside it: two attempts of one task at once). Before, it ran its payload on.
    child-ran: the child is running the task as the worker gives up (it is killed);
    child-late: it had not begun yet (it exits before the task's code)."""
    if with_cgroup and cgroup_host is None:
        pytest.skip("no writable memory cgroup on this host")
    module = f"iris_freeze_{os.getpid()}_{int(late)}{int(with_cgroup)}"
    marks = str(tmp_path / "zattempt*" / "launch_abandoned")
    (tmp_path / f"{module}.py").write_text(_FREEZE_AFTER_FORK.format(late=late, marks=marks))
    ran = tmp_path / "payload_ran"
    pool = ZygotePool({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
                      preload=[module], spawn_timeout_s=2.0)
    try:
        frozen = pool.get(sys.executable)
        payload = cloudpickle.dumps((touch_then_sleep, (str(ran),), {}))
        with pytest.raises(AttemptStartError, match="did not answer a spawn"):
            launch(frozen.spawner(payload), lines,
                   cgroups=cgroup_host if with_cgroup else None)
        left = _wait_gone(module)
        assert left == [], f"processes of the abandoned attempt still run: {left}"
        if late:
            assert not ran.exists(), "the abandoned attempt's task code ran"
    finally:
        for pid in _processes_running(module):
            os.kill(pid, signal.SIGKILL)
        pool.close()


@pytest.mark.parametrize("with_cgroup", [False, True])
def test_a_command_whose_launch_fails_after_it_started_is_killed(
        with_cgroup, cgroup_host, launch, lines, tmp_path):
    """The command started (with a child of its own), then the attempt's record could not be
    written: the launch fails, and neither the command nor its child runs on."""
    if with_cgroup and cgroup_host is None:
        pytest.skip("no writable memory cgroup on this host")
    bg = tmp_path / "bg.pid"
    spawn = popen_spawner(["sh", "-c", f"sleep 600 & echo $! > {bg}.tmp; mv {bg}.tmp {bg}; "
                                       "wait"])
    started = []

    def spawn_then_break_the_record(spec, out_fd, err_fd, cg):
        leader = spawn(spec, out_fd, err_fd, cg)
        started.append(leader.pid)
        deadline = time.monotonic() + 20
        while not bg.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        (spec.attempt_dir / RECORD_NAME).mkdir()  # writing the record fails
        return leader

    with pytest.raises(OSError):
        launch(spawn_then_break_the_record, lines,
               cgroups=cgroup_host if with_cgroup else None)
    child = int(bg.read_text())
    try:
        assert not is_alive(started[0]), "the command runs on"
        assert not is_alive(child), "the command's child runs on"
    finally:
        for pid in (started[0], child):
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_mark_and_the_announcement_see_each_other(tmp_path):
    """Either order: a child announcing after the mark is told to exit; one announced before
    is found (and a record of nothing, or of a gone process, is not)."""
    from iris.worker import halfborn

    assert halfborn.announce(tmp_path) is True
    assert halfborn.spawned(tmp_path)[0] == os.getpid()
    halfborn.reset(tmp_path)
    assert halfborn.spawned(tmp_path) is None
    assert halfborn.abandon(tmp_path, None, 1.0) == []  # nothing announced: nothing killed
    assert halfborn.announce(tmp_path) is False
    (tmp_path / halfborn.SPAWNED_NAME).write_text("123 0")
    assert halfborn.spawned(tmp_path) is None
    (tmp_path / halfborn.SPAWNED_NAME).write_text("garbage")
    assert halfborn.spawned(tmp_path) is None
