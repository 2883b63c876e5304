"""A SystemExit (or another BaseException that is not an Exception) raised in an actor
method reaches the caller as iris.RemoteError naming its type: raised as itself, an actor's
sys.exit() ended the program that called it, past its `except Exception`. A future's wait
refuses a timeout that is not a number, naming it."""

from __future__ import annotations

import os
import sys
import threading

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

    def ping_once(self, path: str) -> str:
        """Answers once `path` exists (up to 60 s): pending for as long as the test needs."""
        gate = threading.Event()
        for _ in range(1200):
            if os.path.exists(path):
                break
            gate.wait(0.05)
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
def test_a_futures_wait_refuses_a_timeout_that_is_not_a_number(cluster, index, timeout,
                                                                tmp_path):
    ref = Quitter.serve(f"quitter-timeout-{index}")
    go = tmp_path / "go"
    gate = ref.ping_once(str(go))  # pending while it is checked (a done one is not waited on)
    with pytest.raises(iris.InvalidRequestError, match="timeout: expected None or a number"):
        gate.result(timeout)  # it failed as "cannot convert float NaN to integer"
    go.touch()
    assert gate.result(60) == "pong"
