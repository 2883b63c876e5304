"""What a task raises reaches the caller as something it can catch and read, and a command
no process can be started with is refused at submit: a real controller and worker.

- an exception that cannot be pickled (it holds a lock) arrives as iris.RemoteError naming
  its type, with the remote traceback; it once read "the task's return value could not be
  pickled", as if the task had returned; so does one whose pickle cannot be loaded (it
  was JobFailedError "exited with code 1");
- a BaseException that is not an Exception (a KeyboardInterrupt-like one raised in the task)
  arrives as JobFailedError: raised as itself it would end the caller past `except
  Exception` (a remote KeyboardInterrupt looks like the user's Ctrl-C);
- a NUL byte in a command's argument or an env value is refused before anything is stored
  (it was accepted, then every attempt failed "could not start: embedded null byte"); so is
  a pip requirement no worker would build (a newline, a NUL, an option);
- a spawn that times out while its actor's constructor keeps failing (retried) says why
  (it said only "not served within 5 s (job ... is pending)")."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

import iris
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import InvalidRequestError, JobFailedError
from iris.client.jobs import build_submission, submission_wire
from tests.cluster.controller_state import controller_state

pytestmark = pytest.mark.slow


class HoldsALock(Exception):
    def __init__(self, text: str):
        super().__init__(text)
        self.lock = threading.Lock()


class TwoArguments(Exception):
    """Pickles, but its pickle cannot be loaded: __init__ wants two arguments, args holds one."""

    def __init__(self, what: str, code: int):
        super().__init__(f"{what} failed with {code}")


class Halt(BaseException):
    """Not an Exception: like KeyboardInterrupt or GeneratorExit."""


def _raise_unpicklable() -> None:
    raise HoldsALock("disk on fire")


def _raise_two_arguments() -> None:
    raise TwoArguments("disk", 3)


def _raise_halt() -> None:
    raise Halt("stop everything")


def _state(cluster) -> dict:
    state_dir = cluster.node.call(cluster.address, CONTROLLER_KEY, "state_dir").result(30)
    return controller_state(cluster.node, cluster.address, Path(state_dir) / "jobs.sqlite3")


def test_an_unpicklable_exception_arrives_as_remote_error_naming_its_type(jobs_cluster):
    with pytest.raises(iris.RemoteError) as info:
        iris.submit(_raise_unpicklable).result(timeout=120)
    err = info.value
    assert err.remote_type.endswith("HoldsALock")
    assert "disk on fire" in str(err) and "return value" not in str(err)
    assert "in _raise_unpicklable" in err.remote_traceback
    assert err.job_status["state"] == "failed"


def test_an_exception_that_cannot_be_rebuilt_arrives_as_remote_error(jobs_cluster):
    with pytest.raises(iris.RemoteError) as info:  # it was JobFailedError "exited with code 1"
        iris.submit(_raise_two_arguments).result(timeout=120)
    assert info.value.remote_type.endswith("TwoArguments")
    assert "disk failed with 3" in str(info.value)
    assert "in _raise_two_arguments" in info.value.remote_traceback


def test_a_base_exception_raised_in_a_task_does_not_escape_as_itself(jobs_cluster):
    with pytest.raises(JobFailedError) as info:
        iris.submit(_raise_halt).result(timeout=120)
    assert "Halt: stop everything" in str(info.value)


@pytest.mark.parametrize("kwargs, says", [
    (dict(entry=["echo", "a\0b"]), r"entry\[1\]: contains a NUL byte"),
    (dict(entry=["true"], env={"A": "x\0y"}), "env: value of A contains a NUL byte"),
    # No worker could build these: refused at submit, not failed in the job's first build.
    (dict(entry=["true"], pip=["numpy\n--index-url=http://elsewhere"]), "pip: invalid"),
    (dict(entry=["true"], pip=["numpy\0"]), "pip: invalid requirement"),
    (dict(entry=["true"], pip=["--index-url=http://elsewhere"]), "pip: options are not"),
])
def test_a_nul_byte_is_refused_at_submit_and_nothing_is_stored(jobs_cluster, kwargs, says):
    before = _state(jobs_cluster)
    with pytest.raises(InvalidRequestError, match=says):
        iris.submit(kwargs.pop("entry"), **kwargs)
    assert _state(jobs_cluster) == before


def test_the_controller_refuses_a_nul_byte_in_argv_sent_past_the_client(jobs_cluster):
    wire = submission_wire(build_submission(["echo", "a\0b"], ()))
    before = _state(jobs_cluster)
    with pytest.raises(InvalidRequestError, match=r"argv\[1\] contains a NUL byte"):
        jobs_cluster.node.call(jobs_cluster.address, CONTROLLER_KEY, "submit",
                               (wire,)).result(60)
    assert _state(jobs_cluster) == before
    assert iris.submit(["true"]).wait(timeout=120)["state"] == "succeeded"  # keeps serving


@iris.actor
class NeedsTwo:
    def __init__(self, a: int, b: int):
        self.sum = a + b

    def total(self) -> int:
        return self.sum


def test_a_spawn_that_times_out_says_why_the_actors_attempts_failed(jobs_cluster):
    # Retried without end (the most retries a job may have), so still pending at the timeout:
    # 100 retries, each failing at once, were all spent within the 5 s on a quiet machine,
    # and the spawn then raised the job's own error instead (CI-equivalent run, once).
    with pytest.raises(iris.ActorNotFoundError) as info:
        iris.spawn(NeedsTwo, 1, 2, 3, name="needs-two", timeout=5,
                   max_retries_failure=1_000_000)
    job_id = re.search(r"\(job (\S+) is", str(info.value)).group(1)
    iris.JobHandle(job_id, jobs_cluster).kill()  # it would retry on, on the shared cluster
    assert "its attempts failed" in str(info.value)
    assert "takes 3 positional arguments but 4 were given" in str(info.value)
