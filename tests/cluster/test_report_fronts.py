"""Report fronts (controller/report_fronts.py), on real processes and sockets: `iris controller
serve --report-fronts 2` and an `iris worker`. A job runs end to end while the worker's
reports go through its front; a front killed with SIGKILL is restarted by the controller
and the worker keeps its registration (it reports to the controller directly meanwhile);
a front refuses what the controller refuses, with the controller's own errors, and what it
refuses changes nothing."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
import zmq

import iris
from iris.actors import Node, NodeConfig
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import InvalidRequestError, PermissionDeniedError
from iris.controller.credentials import controller_token, load_secret
from iris.wire import codec, messages
from tests import joining
from tests.cluster.test_crashes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("report_fronts")]


@pytest.fixture
def fronted(tmp_path):
    """A controller with two report fronts and one worker, as processes of their own."""
    address = f"tcp://127.0.0.1:{free_port()}"
    log = open(tmp_path / "controller.log", "w")  # noqa: SIM115 (read while it runs)
    ctl = subprocess.Popen([sys.executable, "-m", "iris", "controller", "serve", "--state-dir",
                            str(tmp_path / "state"), "--bind", address, "--report-fronts", "2",
                            "--dashboard-port", "0"], stdout=subprocess.PIPE, stderr=log,
                           text=True, start_new_session=True)
    line = ctl.stdout.readline()
    assert line.startswith("controller serving at"), line
    worker = subprocess.Popen([sys.executable, "-m", "iris", "worker", "--controller", address,
                               "--work-dir", str(tmp_path / "w"), "--attr", "cpu=4"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    node = Node(NodeConfig()).start()
    try:
        yield _Cluster(address, tmp_path, node, ctl)
    finally:
        node.stop()
        for proc in (worker, ctl):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        log.close()


class _Cluster:
    def __init__(self, address: str, root: Path, node: Node, ctl: subprocess.Popen):
        self.address, self.root, self.node, self.ctl = address, root, node, ctl
        self.auth = controller_token(load_secret(root / "state"))

    def call(self, method: str, *args, address: str | None = None, auth: bytes | None = None):
        return self.node.call(address or self.address, CONTROLLER_KEY, method, args,
                              timeout_s=30, auth=auth).result(60)

    def fronts(self) -> dict:
        return self.call("snapshot")["reports"].get("fronts", {})

    def front_addresses(self) -> dict[int, str]:
        """Front index -> its address now, from the controller's log (the last one wins)."""
        found = re.findall(r"report front (\d+) up at (\S+)",
                           (self.root / "controller.log").read_text())
        return {int(i): a for i, a in found}

    def forwarded(self, address: str) -> int:
        return self.call("counts", address=address, auth=self.auth)["reports"]

    def registrations(self) -> int:
        return (self.root / "controller.log").read_text().count(" registered at ")


def _front_in_use(c: _Cluster) -> tuple[int, str] | None:
    for index, address in c.front_addresses().items():
        if c.forwarded(address) > 0:
            return index, address
    return None


def test_a_job_runs_end_to_end_while_reports_go_through_a_front(fronted, wait_until):
    c = fronted
    wait_until(lambda: c.fronts().get("up") == 2, what="both fronts up")
    wait_until(lambda: _front_in_use(c), what="the worker's reports reaching a front")
    index, address = _front_in_use(c)
    with iris.connect(c.address):
        assert iris.submit(pow, 6, 7).result(timeout=120) == 6 ** 7
    before = c.forwarded(address)
    wait_until(lambda: c.forwarded(address) > before + 2, what="more reports via the front")
    rows = c.call("list_workers")
    assert len(rows) == 1 and c.registrations() == 1  # kept alive by its front alone


def test_a_front_killed_is_restarted_and_its_worker_is_not_lost(fronted, wait_until):
    c = fronted
    wait_until(lambda: _front_in_use(c), what="the worker's reports reaching a front")
    index, address = _front_in_use(c)
    pid = c.fronts()["pids"][index]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: c.fronts().get("restarts", 0) >= 1 and c.fronts()["up"] == 2
               and c.front_addresses()[index] != address, what="the front restarted")
    assert f"report front {index} (pid {pid}) exited with -9" in \
        (c.root / "controller.log").read_text()  # the operator sees why
    new = c.front_addresses()[index]
    wait_until(lambda: c.forwarded(new) > 0, what="the worker pointed at the new front")
    assert c.registrations() == 1  # never lost, never asked to register again
    with iris.connect(c.address):
        assert iris.submit(pow, 2, 10).result(timeout=120) == 1024


def test_a_front_refuses_what_the_controller_refuses_and_nothing_changes(fronted, wait_until):
    c = fronted
    wait_until(lambda: c.fronts().get("up") == 2 and _front_in_use(c),
               what="both fronts up, the worker reporting through one")
    busy = _front_in_use(c)[0]
    front = c.front_addresses()[1 - busy]  # the one no worker reports to
    mine = joining.credential(c.node, c.address, "w-front-a")
    other = joining.credential(c.node, c.address, "w-front-b")
    cases = [  # (auth, args): a stranger's token, another worker's credential, bad fields
        (secrets.token_bytes(32), ("w-front-a", [])),
        (other, ("w-front-a", [])),
        (mine, ("w-front-a", "not a list")),
        (mine, ("w-front-a", [], {"k": 1}, ["x" * 5000])),
    ]
    for auth, args in cases:
        errors = []
        for where in (front, c.address):
            with pytest.raises((PermissionDeniedError, InvalidRequestError)) as refused:
                c.call("report", *args, address=where, auth=auth)
            errors.append((type(refused.value), str(refused.value).replace(where, "ADDR")))
        assert errors[0] == errors[1]  # the same refusal, word for word
    # Frames that are not IRIS/1, and calls whose payload does not decode: refused, as the
    # controller refuses them.
    bad_payload = [messages.VERSION, messages.CALL, 7, CONTROLLER_KEY, "report", 5000,
                   codec.FORMAT_PICKLE, b"\x80\x05not a pickle", mine]
    short = [messages.VERSION, messages.CALL, 8, CONTROLLER_KEY, "report"]
    replies = [_raw(where, [[b"garbage", b"\x00\x01"], [msgpack.packb(bad_payload)],
                            [msgpack.packb(short), b"x"]])
               for where in (front, c.address)]
    assert replies[0] == [(7, messages.E_PERMISSION), (8, messages.E_PROTOCOL)]  # 7: no id
    assert [r[:2] for r in replies[0]] == [r[:2] for r in replies[1]]
    assert c.forwarded(front) == 0  # nothing it refused reached the controller
    assert not any(w["worker_id"].startswith("w-front") for w in c.call("list_workers"))


def _raw(address: str, messages_out: list) -> list:
    """Send raw frames to `address`; the (call id, error code) of each error that comes back
    within 5 s of the last, in order."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5_000)
    sock.connect(address)
    out = []
    try:
        for frames in messages_out:
            sock.send_multipart(frames)
        while True:
            try:
                frames = sock.recv_multipart()
            except zmq.Again:
                return sorted(out)
            reply = messages.decode(frames[0], frames[1:])
            out.append((reply[2], reply[3]) if reply[1] == messages.ERROR else ("?", reply))
    finally:
        sock.close()
