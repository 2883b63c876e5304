"""A SystemExit (or another BaseException that is not an Exception) raised in an actor
method reaches the caller as iris.RemoteError naming its type: raised as itself, an actor's
sys.exit() ended the program that called it, past its `except Exception`. A future's wait
refuses a timeout that is not a number, naming it."""

from __future__ import annotations

import sys
import time

import pytest

import iris


class Halt(BaseException):
    pass


@iris.actor
class Quitter:
    def quit(self, code: int):
        sys.exit(code)

    def halt(self):
        raise Halt("stop everything")

    def ping(self) -> str:
        return "pong"

    def slow_ping(self, seconds: float) -> str:
        time.sleep(seconds)
        return "pong"


@pytest.mark.parametrize("method, remote_type, text", [
    ("quit", "builtins.SystemExit", "3"),
    ("halt", "Halt", "stop everything"),
])
def test_a_base_exception_arrives_as_remote_error_and_the_actor_serves_on(
        cluster, method, remote_type, text):
    ref = Quitter.serve(f"quitter-{method}")
    args = (3,) if method == "quit" else ()
    with pytest.raises(iris.RemoteError) as info:
        getattr(ref, method)(*args).result(30)
    assert info.value.remote_type.endswith(remote_type)
    assert text in str(info.value) and "Remote traceback" in str(info.value)
    assert ref.ping().result(30) == "pong"


@pytest.mark.parametrize("index, timeout", list(enumerate([float("nan"), "5", True])))
def test_a_futures_wait_refuses_a_timeout_that_is_not_a_number(cluster, index, timeout):
    ref = Quitter.serve(f"quitter-timeout-{index}")
    gate = ref.slow_ping(0.5)  # pending while it is checked
    with pytest.raises(iris.InvalidRequestError, match="timeout: expected None or a number"):
        gate.result(timeout)  # it failed as "cannot convert float NaN to integer"
    assert gate.result(30) == "pong"
