"""Fixtures for the worker's process machinery: real processes, cleaned up after each test."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from iris.worker.cgroups import CgroupHost, detect
from iris.worker.process import AttemptProcess, AttemptSpec

PYTHON = sys.executable
WAIT_S = 60.0  # generous: six agents share two cores


class Lines:
    """Collects output lines from an attempt; tests wait on a line instead of sleeping."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.items: list[tuple[str, bytes]] = []

    def __call__(self, stream: str, line: bytes, ts: float) -> None:
        with self._cond:
            self.items.append((stream, line))
            self._cond.notify_all()

    def text(self, stream: str = "stdout") -> list[str]:
        with self._cond:
            return [line.decode().rstrip("\n") for s, line in self.items if s == stream]

    def wait_for(self, predicate, timeout: float = WAIT_S) -> str:
        """The first stdout/stderr line (decoded) for which predicate(line) is true."""
        def found():
            for _, line in self.items:
                text = line.decode().rstrip("\n")
                if predicate(text):
                    return text
            return None
        with self._cond:
            if not self._cond.wait_for(lambda: found() is not None, timeout):
                raise AssertionError(f"no matching line within {timeout} s; got {self.items}")
            return found()


@pytest.fixture
def lines() -> Lines:
    return Lines()


@pytest.fixture(scope="session")
def cgroup_host() -> CgroupHost | None:
    return detect()


@pytest.fixture
def require_cgroups(cgroup_host) -> CgroupHost:
    if cgroup_host is None:
        pytest.skip("no writable memory cgroup on this host (need v2 memory controller or "
                    "v1 memory hierarchy); limits cannot be enforced here")
    return cgroup_host


@pytest.fixture
def attempts(tmp_path: Path):
    """make(argv, ...) starts an attempt in tmp_path; every attempt is killed at teardown."""
    started: list[AttemptProcess] = []
    counter = iter(range(10_000))

    def make(argv, on_output=None, *, memory_limit_bytes=0, cgroups=None, task_id="t",
             env=None) -> AttemptProcess:
        n = next(counter)
        workdir = tmp_path / f"work{n}"
        workdir.mkdir()
        spec = AttemptSpec(task_id=task_id, attempt=n, attempt_dir=tmp_path / f"attempt{n}",
                           cwd=workdir, env=env or {"PATH": "/usr/bin:/bin"},
                           memory_limit_bytes=memory_limit_bytes)
        proc = AttemptProcess.start(spec, argv, on_output, cgroups=cgroups)
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop(grace_s=0)


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory):
    """One venv cache per test session; uv's own package cache is shared across runs."""
    from iris.worker.envs import EnvConfig, EnvironmentCache

    return EnvironmentCache(EnvConfig(root=tmp_path_factory.mktemp("envs")))


@pytest.fixture
def zygote():
    """A zygote on the test interpreter, closed (its attempts killed by `attempts`) after."""
    from iris.worker.zygote import Zygote

    z = Zygote(PYTHON, {"PATH": "/usr/bin:/bin"})
    yield z
    z.close()


@pytest.fixture
def launch(tmp_path: Path):
    """launch(spawner, ...) like `attempts` but for any spawner (zygote or callable)."""
    started: list[AttemptProcess] = []
    counter = iter(range(10_000))

    def make(spawner, on_output=None, *, memory_limit_bytes=0, cgroups=None, env=None):
        n = next(counter)
        workdir = tmp_path / f"zwork{n}"
        workdir.mkdir()
        spec = AttemptSpec(task_id="z", attempt=n, attempt_dir=tmp_path / f"zattempt{n}",
                           cwd=workdir, env=env or {"PATH": "/usr/bin:/bin"},
                           memory_limit_bytes=memory_limit_bytes)
        proc = AttemptProcess.launch(spec, spawner, on_output, cgroups=cgroups)
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop(grace_s=0)
