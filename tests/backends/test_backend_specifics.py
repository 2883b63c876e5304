"""What only one backend does: the in-process backend's child processes (a task with its
own env, a command, `inprocess+process`), and the Ray backend's refusal of what Ray cannot
place, before anything is submitted."""

from __future__ import annotations

import os

import pytest

import iris
from tests.backends import tasks
from tests.backends.conftest import untagged


def _env_and_pid(name: str) -> tuple[str | None, int, str]:
    return os.environ.get(name), os.getpid(), iris.task_info().job_id


def test_a_task_with_its_own_env_runs_in_a_child_process_in_process():
    with iris.backend("inprocess"):
        value, pid, job = iris.submit(_env_and_pid, "GREETING",
                                      env={"GREETING": "hi"}).result(timeout=60)
    assert value == "hi" and pid != os.getpid() and job.startswith("/")
    assert os.environ.get("GREETING") is None  # this process's environment is untouched


def test_a_command_job_in_process_fails_with_its_exit_code():
    with iris.backend("inprocess"):
        assert iris.submit(["true"]).result(timeout=60) == 0
        with pytest.raises(iris.JobFailedError, match="exited with code 3"):
            iris.submit(["sh", "-c", "exit 3"]).result(timeout=60)


def test_killing_a_child_process_task_kills_the_process():
    with untagged(), iris.backend("inprocess+process"):
        job = iris.submit(tasks.sleep_for, 60.0)
        assert not job.done()
        job.kill()
        assert job.wait(timeout=30)["state"] == "killed"
        with pytest.raises(iris.JobFailedError, match="killed"):
            job.result(timeout=30)


@pytest.mark.xdist_group("ray")
@pytest.mark.parametrize("resources, named", [
    (iris.Resources(tpu="v5litepod-16"), "cannot hold a whole slice"),
    (iris.Resources(disk="1TB"), "no disk resource"),
])
def test_ray_backend_refuses_what_ray_cannot_place_before_submitting(ray_head, resources,
                                                                     named):
    from iris.backends.ray.backend import RayBackend

    with iris.backend(RayBackend()):
        with pytest.raises(iris.UnschedulableError, match=named):
            iris.submit(tasks.square, 2, resources=resources)
        with pytest.raises(iris.UnschedulableError, match=named):
            iris.map(tasks.square, [1, 2], resources=resources)


def _exits(code: int) -> None:
    raise SystemExit(code)


def _interrupted(_: int) -> None:
    raise KeyboardInterrupt


def test_a_task_or_map_raising_a_base_exception_does_not_end_the_caller_in_process():
    """As on Iris (tests/cluster/test_task_error_transport.py): a task's SystemExit is the
    job's failure (JobFailedError saying it), a map function's KeyboardInterrupt a RemoteError
    naming it; raised as themselves they ended the calling program past `except Exception`."""
    with iris.backend("inprocess"):
        with pytest.raises(iris.JobFailedError, match="SystemExit: 3"):
            iris.submit(_exits, 3).result(timeout=60)
        with pytest.raises(iris.RemoteError, match="KeyboardInterrupt") as info:
            list(iris.map(_interrupted, [1], retries=0))
        assert "_interrupted" in info.value.remote_traceback


@pytest.mark.parametrize("backend", ["inprocess", "iris"], indirect=True)
def test_a_map_function_calling_sys_exit_fails_its_item_not_the_map(backend):
    """On Iris the map worker caught Exception only: sys.exit in the function ended the
    worker, each retry's too, and the caller saw "the task running it died 4 times"."""
    with pytest.raises(iris.RemoteError, match="SystemExit"):
        list(iris.map(_exits, [5], retries=0))
