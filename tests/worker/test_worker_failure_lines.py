"""What a user reads when an attempt fails (issue 18): exit codes and signals named, out of
memory with its limit, a missing command by its name and never by an internal path."""

from __future__ import annotations

import sys

import pytest

import iris
from iris.base.resources import human_bytes
from iris.worker.outcome import failure_line
from iris.worker.process import AttemptStartError
from tests.conftest import as_current

PYTHON = sys.executable
WAIT_S = 60.0  # generous: six agents share two cores


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1000, "1000 B"), (64 << 20, "64 MiB"), (2 << 30, "2 GiB"),
    (1536 << 20, "1.5 GiB"), (10 << 40, "10 TiB")])
def test_sizes_in_failure_lines_read_in_binary_units(n, text):
    assert human_bytes(n) == text


def test_a_nonzero_exit_names_its_code(attempts):
    outcome = attempts([PYTHON, "-c", "raise SystemExit(3)"]).wait(WAIT_S)
    assert failure_line(outcome) == "exited with code 3"


def test_a_process_killed_by_a_signal_names_the_signal(attempts):
    outcome = attempts(["/bin/sh", "-c", "kill -TERM $$"]).wait(WAIT_S)
    assert failure_line(outcome) == "killed by SIGTERM"


def test_an_oom_kill_names_the_signal_and_the_limit(attempts, require_cgroups):
    hog = "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096])"
    proc = attempts([PYTHON, "-c", hog], memory_limit_bytes=64 << 20, cgroups=require_cgroups)
    assert failure_line(proc.wait(WAIT_S)) == "killed by SIGKILL: out of memory (limit 64 MiB)"


@pytest.mark.parametrize("with_cgroup", [False, True])
def test_a_missing_command_is_named_without_internal_paths(attempts, cgroup_host, tmp_path,
                                                           with_cgroup):
    if with_cgroup and cgroup_host is None:
        pytest.skip("this host offers no writable memory cgroup")
    cgroups = cgroup_host if with_cgroup else None
    with pytest.raises(AttemptStartError) as info:
        attempts(["nonexistent"], cgroups=cgroups, memory_limit_bytes=64 << 20)
    assert str(info.value) == "command not found: nonexistent"
    assert info.value.exit_code == 127
    assert not (tmp_path / "attempt0" / "cgroup.path").exists()  # its cgroup is gone again


def test_a_relative_command_missing_from_the_work_dir_is_not_found(attempts):
    with pytest.raises(AttemptStartError, match="^command not found: ./run.sh$"):
        attempts(["./run.sh"])


def test_a_file_that_is_not_executable_is_refused_naming_it(attempts, tmp_path):
    script = tmp_path / "plain.sh"
    script.write_text("echo hi\n")
    with pytest.raises(AttemptStartError, match="not executable") as info:
        attempts([str(script)])
    assert info.value.exit_code == 126


def test_a_command_found_on_the_tasks_path_runs(attempts, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "mytool"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    proc = attempts(["mytool"], env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert proc.wait(WAIT_S).ok


# ------------------------------------------------------------ through a cluster


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    with iris.local_cluster(workers=1, state_dir=tmp_path_factory.mktemp("cluster"),
                            stop_grace_s=2.0) as ctx:
        yield ctx


@pytest.fixture
def current(one_worker):
    with as_current(one_worker):
        yield one_worker


def test_a_job_of_a_missing_command_fails_saying_so_in_status_and_result(current):
    job = iris.submit(["nonexistent"])
    status = job.wait(120)
    error = status["tasks"][0]["error"]
    assert status["state"] == "failed"
    assert "command not found: nonexistent" in error
    assert "cgroup" not in error and "/sys/" not in error
    with pytest.raises(iris.errors.IrisError, match="command not found: nonexistent"):
        job.result(120)


def test_a_job_killed_by_a_signal_says_which(current):
    status = iris.submit(["/bin/sh", "-c", "kill -TERM $$"]).wait(120)
    assert status["tasks"][0]["error"].startswith("killed by SIGTERM")


def test_a_cgroup_that_cannot_be_joined_is_reported_without_its_path(tmp_path):
    import subprocess

    from iris.worker.cgroups import join_then_exec_argv

    procs = tmp_path / "no-such-cgroup" / "cgroup.procs"
    done = subprocess.run(join_then_exec_argv(procs, ["true"]), capture_output=True,
                          text=True, timeout=WAIT_S)
    assert done.returncode == 125
    assert done.stderr == "iris: cannot join the attempt's memory cgroup\n"
