"""The Worker actor on real sockets in one process, beside a fake controller actor that
records what the worker reports: starts and stops go through its executor and come back as
updates, in order; a stop that arrives while the attempt is still starting is not lost."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest

from iris.actors import Node, NodeConfig, actor
from iris.actors.keys import CONTROLLER_KEY, worker_key
from iris.base.errors import PermissionDeniedError
from iris.base.resources import Resources
from iris.logstore.reader import read_logs
from iris.logstore.sinks import LocalDirSink
from iris.wire.bundles import pack
from iris.worker.actor import HEARTBEAT_S, Worker

WAIT_S = 120.0  # generous: six agents share two cores, and the first start builds a venv
TOKEN = b"t" * 32  # the cluster token: it buys the worker its own credential (join)
CREDENTIAL, COMMANDS = b"c" * 32, b"k" * 32  # the worker's own, and the controller's for it


@actor
class FakeController:
    """Acknowledges every report; serves bundles once `gate` is open."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.updates: list[dict] = []
        self.samples: list[dict] = []  # usage readings (control.UsageSample)
        self.bundles: dict[str, bytes] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.registered = threading.Event()
        self.joins = 0
        self.proofs: list[bytes | None] = []  # what each join proved it held
        self.refuse_reports = False  # as a controller that revoked (or forgot) the credential
        self.barred = False  # as a controller whose operator revoked this worker

    def join(self, worker_id, proof=None):
        with self.cond:
            self.joins += 1
            self.proofs.append(proof)
            self.cond.notify_all()
            if self.barred:
                raise PermissionDeniedError(f"worker {worker_id!r} was revoked by an operator")
            self.refuse_reports = False
        return {"worker_id": worker_id, "credential": CREDENTIAL, "command_token": COMMANDS}

    def register_worker(self, worker_id, address, attributes, running, updates=()):
        self._record(updates)
        self.registered.set()
        return []

    def report(self, worker_id, updates, stats=None, running=None, usage=()) -> dict:
        if self.refuse_reports:
            raise PermissionDeniedError("report: not permitted (credential revoked)")
        self._record(updates)
        with self.cond:
            self.samples.extend(usage)
        return {"acked": [u["attempt_id"] for u in updates]}

    def goodbye(self, worker_id, address) -> None:
        pass

    async def get_bundle(self, digest: str) -> bytes:
        await asyncio.to_thread(self.gate.wait, WAIT_S)
        return self.bundles[digest]

    def _record(self, updates) -> None:
        with self.cond:
            self.updates.extend(updates)
            self.cond.notify_all()

    def wait_for(self, attempt_id: str, status: str) -> dict:
        def found():
            return next((u for u in self.updates
                         if u["attempt_id"] == attempt_id and u["status"] == status), None)
        with self.cond:
            assert self.cond.wait_for(lambda: found() is not None, WAIT_S), self.updates
            return found()

    def statuses(self, attempt_id: str) -> list[str]:
        with self.cond:
            return [u["status"] for u in self.updates if u["attempt_id"] == attempt_id]


@pytest.fixture(scope="module")
def envs_dir(tmp_path_factory) -> Path:
    """One venv cache for the module's workers: each test starts (and stops) its own."""
    return tmp_path_factory.mktemp("envs")


@pytest.fixture
def worker(tmp_path, envs_dir):
    """(fake controller, a function calling the worker, its work dir), one Worker serving."""
    root = tmp_path / "worker"
    root.mkdir()
    (root / "envs").symlink_to(envs_dir)
    controller_node = Node(NodeConfig()).start()
    worker_node = Node(NodeConfig()).start()
    try:
        fake = controller_node.host(CONTROLLER_KEY, FakeController).instance
        worker_node.host(worker_key("w-test"), Worker, (
            "w-test", controller_node.address, CONTROLLER_KEY, {"region": "local"}, root,
            worker_node, Resources(cpu=2, memory="1GB"), 2.0, TOKEN))

        def call(method: str, *args):
            return controller_node.call(worker_node.address, worker_key("w-test"), method,
                                        args, auth=COMMANDS, timeout_s=30).result()

        assert fake.registered.wait(WAIT_S)  # joined: the command token is granted

        yield fake, call, root
    finally:
        worker_node.stop()
        controller_node.stop()


def launch(attempt_id: str, argv: list[str], logs: Path, bundle: str | None = None) -> dict:
    return {"attempt_id": attempt_id, "job_id": f"/test/{attempt_id}", "task_index": 0,
            "attempt_number": 0, "entrypoint": {"kind": "command", "argv": argv}, "env": {},
            "bundle": bundle, "log_store": {"kind": "local", "root": str(logs)}}


def test_an_attempt_is_reported_building_running_exited_and_its_output_is_stored(worker):
    fake, call, root = worker
    assert call("start_attempt", launch("att-ok", ["/bin/sh", "-c", "echo hello"],
                                        root / "logs")) is True
    assert fake.wait_for("att-ok", "exited")["exit_code"] == 0
    assert fake.statuses("att-ok") == ["building", "running", "exited"]
    lines = read_logs(LocalDirSink(str(root / "logs" / "iris")), "/test/att-ok")
    assert [line.text.strip() for line in lines if line.stream == "stdout"] == ["hello"]
    assert "att-ok" not in call("status")["attempts"]


def test_a_resent_start_runs_the_attempt_once(worker):
    fake, call, root = worker
    body = launch("att-twice", ["/bin/sh", "-c", "echo once"], root / "logs")
    assert call("start_attempt", body) is True
    assert call("start_attempt", body) is True
    fake.wait_for("att-twice", "exited")
    lines = read_logs(LocalDirSink(str(root / "logs" / "iris")), "/test/att-twice")
    assert [line.text.strip() for line in lines if line.stream == "stdout"] == ["once"]


def test_a_stop_while_the_attempt_is_still_starting_stops_it_once_it_runs(worker, tmp_path):
    fake, call, root = worker
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "data.txt").write_text("x")
    digest, data = pack(tmp_path / "ws")
    fake.bundles[digest] = data
    fake.gate.clear()  # the bundle fetch hangs: the attempt stays in its start
    try:
        assert call("start_attempt", launch("att-stop", ["/bin/sleep", "600"], root / "logs",
                                             bundle=digest)) is True
        fake.wait_for("att-stop", "building")
        assert call("stop_attempt", {"attempt_id": "att-stop", "grace_s": 1.0}) is True
    finally:
        fake.gate.set()
    exited = fake.wait_for("att-stop", "exited")
    assert exited["exit_code"] == 143 and "stopped on request" in exited["error"]


def test_a_stop_of_an_attempt_this_worker_does_not_hold_is_refused(worker):
    _, call, _ = worker
    assert call("stop_attempt", {"attempt_id": "att-unknown", "grace_s": 1.0}) is False


def test_a_launch_that_does_not_decode_is_refused_and_nothing_starts(worker):
    _, call, root = worker
    bad = launch("att-bad", ["/bin/true"], root / "logs")
    del bad["entrypoint"]
    with pytest.raises(Exception, match="entrypoint"):
        call("start_attempt", bad)
    assert "att-bad" not in call("status")["attempts"]


def test_a_refused_worker_joins_again_and_keeps_its_credential_in_its_work_dir(worker):
    from iris.worker import credential

    fake, call, root = worker
    held = credential.read(root, "w-test")
    assert held is not None and held.credential == CREDENTIAL  # kept for its restarts
    fake.registered.clear()
    fake.refuse_reports = True  # its next report is refused: it joins with the cluster token
    assert fake.registered.wait(WAIT_S) and fake.joins >= 2, fake.joins
    # It proved it held its credential (a controller restarted since it joined knows
    # which id that credential owns, and gives the id to no one else).
    assert fake.proofs[0] is None and fake.proofs[-1] == CREDENTIAL
    # Registered again with a new credential: the controller's command token works again.
    assert call("stop_attempt", {"attempt_id": "att-none", "grace_s": 1.0,
                                 "reason": "r"}) is False


def test_a_barred_worker_stops_joining_every_heartbeat_and_says_why(worker, caplog):
    fake, _, _ = worker
    caplog.set_level(logging.WARNING, logger="iris.worker.actor")
    fake.barred = fake.refuse_reports = True  # an operator revoked it: refused, then barred
    with fake.cond:
        assert fake.cond.wait_for(lambda: fake.joins >= 2, WAIT_S), fake.joins
    told = threading.Event()
    told.wait(3 * HEARTBEAT_S + 1.0)  # several heartbeats: no join in them
    assert fake.joins == 2
    said = [r.getMessage() for r in caplog.records if "barred" in r.getMessage()]
    assert said and "revoked by an operator" in said[0] and "again in" in said[0], said


def test_a_worker_shows_the_credential_it_kept_for_another_address_at_its_first_join(
        tmp_path, envs_dir):
    """A local cluster restarted on its state directory serves at a new port: the worker's
    kept credential names the old address, and still proves the id is its own."""
    from iris.worker import credential

    root = tmp_path / "worker"
    root.mkdir()
    (root / "envs").symlink_to(envs_dir)
    old = b"o" * 32
    credential.write(root, credential.Credential("w-test", "tcp://127.0.0.1:1", old, b"x" * 32))
    controller_node = Node(NodeConfig()).start()
    worker_node = Node(NodeConfig()).start()
    try:
        fake = controller_node.host(CONTROLLER_KEY, FakeController).instance
        worker_node.host(worker_key("w-test"), Worker, (
            "w-test", controller_node.address, CONTROLLER_KEY, {"region": "local"}, root,
            worker_node, Resources(cpu=2, memory="1GB"), 2.0, TOKEN))
        assert fake.registered.wait(WAIT_S)
        assert fake.proofs == [old]
        assert credential.read(root, "w-test", controller_node.address).credential == CREDENTIAL
    finally:
        worker_node.stop()
        controller_node.stop()
