"""A SystemExit (or another BaseException that is not an Exception) raised in an actor
method reaches the caller as iris.RemoteError naming its type: raised as itself, an actor's
sys.exit() ended the program that called it, past its `except Exception`."""

from __future__ import annotations

import sys

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
