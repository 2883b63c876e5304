"""Roles from outside (docs/protocol.md, Roles and Payloads): what a local process holding no
token, or a host holding one worker's credential, can make the control plane do through raw
ZeroMQ sockets, with frames it builds itself rather than through Iris's own client.

A pickle is code. The tokens guard the control plane against every local process that
cannot read the controller's state directory; they would mean nothing if such a process
could send a pickled call and have it loaded, or a worker could answer the controller with
a pickled value or exception. Every probe here carries one that touches a marker file when
it is loaded: the marker must never appear, and the cluster must go on serving.
"""

from __future__ import annotations

import os
import pickle
import threading
import time

import msgpack
import pytest
import zmq

import iris
from iris.actors import tokens
from iris.actors.keys import (
    CONTROLLER_KEY,
    INSPECT_KEY,
    REGISTRY_KEY,
    region_key,
    worker_inspect_key,
    worker_key,
)
from iris.base.errors import ConflictError
from iris.controller import credentials
from iris.controller.credentials import controller_token, load_secret
from iris.worker import credential
from tests import joining

pytestmark = pytest.mark.xdist_group("roles-outside")


class _Touch:
    """Unpickling it runs `touch PATH` in whoever loads it."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _dealer(ctx: zmq.Context, address: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(address)
    return sock


def _raw_call(ctx, address: str, actor: str, method: str, fmt: int, payload,
              auth: bytes | None = None) -> list:
    """One CALL built by hand; the decoded ERROR or REPLY header."""
    sock = _dealer(ctx, address)
    try:
        head = [1, 1, 7, actor, method, 30_000, fmt, payload, *([auth] if auth else [])]
        sock.send(msgpack.packb(head))
        assert sock.poll(60_000), f"{actor}.{method}: no answer"
        return msgpack.unpackb(sock.recv(), raw=False)
    finally:
        sock.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("outside")
    ctx = zmq.Context()
    with iris.local_cluster(workers=1, state_dir=root, stop_grace_s=2.0) as cluster, \
            iris.connect(cluster.address) as client:
        [real] = client.node.call(cluster.address, CONTROLLER_KEY, "list_workers").result(60)
        yield {"cluster": cluster, "node": client.node, "worker": real, "ctx": ctx,
               "root": root}
    ctx.destroy(linger=0)


def _targets(world) -> list[tuple[str, str, str]]:
    address, real = world["cluster"].address, world["worker"]
    wid = real["worker_id"]
    return [(address, CONTROLLER_KEY, "status"), (address, CONTROLLER_KEY, "submit"),
            (address, INSPECT_KEY, "task_stack"), (address, region_key("local"), "inventory"),
            (address, REGISTRY_KEY, "list"), (real["address"], worker_key(wid), "status"),
            (real["address"], worker_inspect_key(wid), "stack")]


def test_a_pickled_call_to_any_control_plane_actor_is_refused_unread(world, tmp_path):
    for i, (address, actor, method) in enumerate(_targets(world)):
        marker = tmp_path / f"loaded-{i}"
        got = _raw_call(world["ctx"], address, actor, method, 1,
                        pickle.dumps(((_Touch(marker),), {})))
        assert got[1] == 4, (actor, method, got)  # an ERROR
        assert got[3] in ("protocol", "permission_denied"), (actor, method, got)
        if got[3] == "protocol":
            assert "pickle" in got[4] and actor in got[4], got[4]
        assert not marker.exists(), f"{actor}.{method} loaded a peer's pickle"
    # ...and the same actors still serve plain calls.
    node, address = world["node"], world["cluster"].address
    assert node.call(address, REGISTRY_KEY, "list", ("/",)).result(60) is not None
    assert node.call(world["worker"]["address"], worker_key(world["worker"]["worker_id"]),
                     "status").result(60)["worker_id"] == world["worker"]["worker_id"]


def test_a_pickled_call_with_a_workers_credential_is_refused_unread(world, tmp_path):
    node, address = world["node"], world["cluster"].address
    cred = joining.credential(node, address, "w-pickler")
    marker = tmp_path / "loaded"
    got = _raw_call(world["ctx"], address, CONTROLLER_KEY, "report", 1,
                    pickle.dumps((("w-pickler", [_Touch(marker)]), {})), auth=cred)
    assert got[1] == 4 and got[3] in ("protocol", "permission_denied"), got
    assert not marker.exists()


class _FakeWorker:
    """A host that joined and registered with the controller, whose node is a bare ROUTER
    answering the controller's commands with whatever the test says."""

    def __init__(self, world, worker_id: str):
        self.id, self.ctx = worker_id, world["ctx"]
        self.node, self.controller = world["node"], world["cluster"].address
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.linger = 0
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.credential = joining.credential(self.node, self.controller, worker_id)
        self._stop = threading.Event()
        self._call("register_worker", worker_id, self.address,
                   {"cpu": "64", "memory": str(2**36)}, [])
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._beat.start()

    def _call(self, method: str, *args):
        return self.node.call(self.controller, CONTROLLER_KEY, method, args, timeout_s=30,
                              auth=self.credential).result(60)

    def _heartbeat(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._call("report", self.id, [], None, [])
            except Exception:  # the cluster is stopping
                return

    def next_command(self, method: str, timeout_s: float = 120.0) -> tuple[bytes, list]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.router.poll(1000):
                rid, header, *_ = self.router.recv_multipart()
                head = msgpack.unpackb(header, raw=False)
                if head[4] == method:
                    return rid, head
        raise AssertionError(f"the controller sent {self.id} no {method}")

    def answer(self, rid: bytes, head: list) -> None:
        self.router.send_multipart([rid, msgpack.packb(head)])

    def close(self) -> None:
        self._stop.set()
        self._beat.join(10)
        self.router.close()


def test_a_workers_pickled_answers_to_the_controllers_commands_are_not_loaded(world,
                                                                               tmp_path):
    fake = _FakeWorker(world, "w-answers-in-pickles")
    node, address = world["node"], world["cluster"].address
    try:
        with iris.connect(address):
            job = iris.submit(["sleep", "600"], resources=iris.Resources(cpu=48))
            try:
                as_error, as_value = tmp_path / "loaded-error", tmp_path / "loaded-value"
                rid, head = fake.next_command("start_attempt")
                fake.answer(rid, [1, 4, head[2], "app", "boom",
                                  {"type": "builtins.RuntimeError", "traceback": "",
                                   "pickled": pickle.dumps(_Touch(as_error))}])
                rid, head = fake.next_command("start_attempt")  # sent again: never ran
                fake.answer(rid, [1, 3, head[2], 1, pickle.dumps(_Touch(as_value))])
                time.sleep(1.0)  # (the answers were read by now; waiting longer changes nothing)
                assert not as_error.exists(), "the controller loaded a worker's pickled error"
                assert not as_value.exists(), "the controller loaded a worker's pickled reply"
                assert job.status()["state"] not in ("failed", "succeeded")
            finally:
                job.kill()
    finally:
        fake.close()
    # The controller still serves.
    assert node.call(address, CONTROLLER_KEY, "list_workers").result(60)


def test_a_host_with_the_cluster_token_cannot_take_over_a_silent_workers_id(world):
    """Silent past LIVE_S (a 6 s blip) is not lost (30 s): a host joining under the id with
    the cluster token alone is refused, and the worker goes on with its credential."""
    node, address = world["node"], world["cluster"].address
    victim = joining.join(node, address, "w-blip")
    call = lambda method, *args, auth=victim["credential"]: node.call(  # noqa: E731
        address, CONTROLLER_KEY, method, args, timeout_s=30, auth=auth).result(60)
    call("register_worker", "w-blip", "tcp://127.0.0.1:9", {"cpu": "1"}, [])
    time.sleep(credentials.LIVE_S + 1.5)  # the blip
    with pytest.raises(ConflictError, match="w-blip is registered"):
        joining.join(node, address, "w-blip")
    assert not call("report", "w-blip", [])["reregister"]  # its credential still works
    call("goodbye", "w-blip", "tcp://127.0.0.1:9")


def _forms(secret: bytes) -> list:
    return [secret, secret.hex(), secret.hex().upper(), repr(secret)[2:-1]]


def test_what_anyone_may_read_holds_no_token_and_no_credential(world):
    """Every method open to a client, called with no token: its answer names no secret of
    the cluster (the worker's credential and command token, the cluster, admin and
    controller tokens), in any of the forms one is written in; nor do the worker's logs."""
    node, address, real = world["node"], world["cluster"].address, world["worker"]
    state = world["root"] / "controller"
    held = credential.read(world["root"] / "worker-0", real["worker_id"])
    secrets = [held.credential, held.command_token, controller_token(load_secret(state)),
               *(tokens.read(state / name) for name in (tokens.CLUSTER_TOKEN_FILE,
                                                        tokens.ADMIN_TOKEN_FILE))]
    answers = [node.call(address, CONTROLLER_KEY, method).result(60)
               for method in ("snapshot", "list_workers", "regions", "log_config",
                              "state_dir", "restored", "figures", "list_jobs")]
    answers += [node.call(address, REGISTRY_KEY, "list", ("/",)).result(60),
                node.call(address, region_key("local"), "inventory").result(60),
                node.call(address, region_key("local"), "stats").result(60),
                node.call(real["address"], worker_key(real["worker_id"]), "status").result(60)]
    text = msgpack.packb(answers, default=repr).hex() + repr(answers)
    # ...nor do the logs the worker and its watchdog wrote so far (refusals included).
    text += "".join(log.read_text(errors="replace") for log in
                    sorted((world["root"] / "worker-0").glob("*.log")))
    for secret in secrets:
        for form in _forms(secret):
            needle = form.hex() if isinstance(form, bytes) else form
            assert needle not in text, "an open method's answer holds a secret"


def test_after_every_probe_above_a_job_still_runs_to_its_end(world):
    with iris.connect(world["cluster"].address):
        job = iris.submit(["true"])
        assert job.wait(timeout=240)["state"] == "succeeded", job.status()
