"""Which backend runs `iris.*`: the innermost `with`, then (inside an Iris task) the task's
cluster, then $IRIS_BACKEND, else nothing (submit starts a local cluster, as it always
has; resolve and get say there is no cluster). No cluster is started in these tests."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import iris
from iris.backends import select
from iris.base.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("spec, kind, address, isolation", [
    ("inprocess", "inprocess", None, "thread"),
    ("inprocess+process", "inprocess", None, "process"),
    ("ray", "ray", None, "thread"),
    ("ray://10.1.2.3:6379", "ray", "10.1.2.3:6379", "thread"),
    ("tcp://127.0.0.1:5555", "iris", "tcp://127.0.0.1:5555", "thread"),
])
def test_specs_parse(spec, kind, address, isolation):
    assert select.parse(spec) == select.Spec(kind, address, isolation)


@pytest.mark.parametrize("spec", ["", "local", "ray://", "tcp://host", "tcp://host:port",
                                  "inprocess+thread", "RAY"])
def test_bad_spec_is_refused_naming_the_forms(spec):
    with pytest.raises(ConfigError, match="expected"):
        select.parse(spec)


def test_nested_contexts_swap_and_restore():
    assert iris.backend_kind() == "none"
    with iris.backend("inprocess") as outer:
        outer.serve(_Echo, "echo")
        with iris.backend("inprocess") as inner:
            assert iris.backend_kind() == "inprocess"
            with pytest.raises(iris.ActorNotFoundError):  # the inner one has its own names
                iris.resolve("echo", timeout=0)
            assert inner is not outer
        assert iris.resolve("echo", timeout=0).say("hi").result(timeout=10) == "hi"
    assert iris.backend_kind() == "none"


def test_threads_and_tasks_inherit_the_backend():
    with iris.backend("inprocess"):
        seen = iris.submit(_kind_here).result(timeout=30)
        assert seen == "inprocess"
        assert iris.map(_kind_of, range(3)) == ["inprocess"] * 3


def test_no_backend_resolve_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv("IRIS_BACKEND", raising=False)
    with pytest.raises(iris.IrisError, match="iris.backend"):
        iris.resolve("anything", timeout=0)
    with pytest.raises(iris.IrisError, match="no Iris cluster"):
        iris.put(b"x")


def test_a_bad_iris_backend_variable_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("IRIS_BACKEND", "cluster-please")
    with pytest.raises(ConfigError, match="IRIS_BACKEND|expected one of"):
        iris.resolve("anything", timeout=0)


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_") or
            k == "IRIS_TEST_PROCESS_TAG"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**base, "PYTHONPATH": str(ROOT), **env})


def test_iris_backend_variable_makes_a_program_run_in_process():
    """A program written for a cluster runs unchanged in process, with no cluster started,
    and every thread of it (even one it starts itself) sees the same backend."""
    code = """if True:
        import threading, iris
        @iris.actor
        class Box:
            def __init__(self): self.v = 0
            def put(self, v): self.v = v; return v
        def square(x): return x * x
        ref = iris.spawn(Box, name="box")
        out = []
        t = threading.Thread(target=lambda: out.append(iris.resolve("box").put(7).result()))
        t.start(); t.join()
        print(iris.backend_kind(), iris.submit(square, 4).result(), iris.map(square, [1, 2]),
              out, threading.active_count() < 50)
    """
    done = _run(code, {"IRIS_BACKEND": "inprocess"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "inprocess 16 [1, 4] [7] True"
    assert "started a local one" not in done.stderr


def test_leaked_iris_backend_never_redirects_an_iris_task():
    """Inside an Iris task (IRIS_JOB_ID and IRIS_ADDRESS set by its worker) the task's own
    cluster wins over an IRIS_BACKEND that leaked through the worker's environment."""
    code = "import iris.backends.select as s; print(type(s._EnvDefault()()).__name__)"
    done = _run(code, {"IRIS_BACKEND": "inprocess", "IRIS_JOB_ID": "/u/j",
                       "IRIS_ADDRESS": "tcp://127.0.0.1:9"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ClusterContext"


def test_submit_only_options_of_iris_are_refused_elsewhere():
    with iris.backend("inprocess"), pytest.raises(iris.InvalidRequestError,
                                                  match="durable: only an Iris cluster"):
        iris.submit(_kind_here, durable=True)


def test_in_process_backend_closes_what_it_started():
    before = threading.active_count()
    with iris.backend("inprocess"):
        iris.spawn(_Echo, name="a")
        iris.submit(_spin)
        iris.map(_kind_of, range(100), max_parallel=8)
    assert threading.active_count() <= before


@iris.actor
class _Echo:
    def say(self, text: str) -> str:
        return text


def _kind_here() -> str:
    return iris.backend_kind()


def _kind_of(_: int) -> str:
    return iris.backend_kind()


def _spin() -> None:
    while True:  # a busy task: closing the backend must stop it
        sum(range(100))
