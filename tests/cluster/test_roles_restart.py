"""Roles across a controller restart (kill -9), on real processes: the controller keeps
which credential owns which worker id (hashes, in STATE_DIR/worker_credentials), so right
after a restart a host holding only the cluster token cannot join under a live worker's
id; the real worker joins again by proving it holds its credential, and is commanded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import iris
from iris.actors import tokens
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import ConflictError, PeerUnavailableError
from iris.client.jobs import _controller
from tests.cluster.test_crashes import _kill_group, free_port, start_controller

pytestmark = pytest.mark.slow


def _join_refusal(ctx, address: str, worker_id: str, token: bytes) -> object:
    """What a join with the cluster token alone gets: the answer, or the refusal; None
    while the controller does not answer yet."""
    try:
        return ctx.node.call(address, CONTROLLER_KEY, "join", (worker_id,), timeout_s=5,
                             auth=token).result(10)
    except (PeerUnavailableError, TimeoutError):
        return None
    except iris.IrisError as exc:
        return exc


def _workers(ctx) -> dict[str, str]:
    try:
        return {w["worker_id"]: w["address"]
                for w in _controller(ctx, "list_workers", timeout_s=5.0)}
    except iris.IrisError:
        return {}


def _start_worker(address: str, work_dir: Path, log: Path) -> subprocess.Popen:
    """As test_crashes.start_worker, its log kept: it says how each join went."""
    with open(log, "w") as err:
        return subprocess.Popen([sys.executable, "-m", "iris", "worker", "--controller",
                                 address, "--work-dir", str(work_dir), "--attr", "cpu=32"],
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def test_after_a_restart_a_host_with_the_cluster_token_cannot_take_a_live_workers_id(
        tmp_path, wait_until):
    address = f"tcp://127.0.0.1:{free_port()}"
    state = tmp_path / "state"
    controller = start_controller(state, address)
    log = tmp_path / "worker.log"
    worker = _start_worker(address, tmp_path / "w0", log)
    try:
        with iris.connect(address) as ctx:
            [real] = wait_until(lambda: _controller(ctx, "list_workers") or None,
                                what="the worker")
            wid, where = real["worker_id"], real["address"]
            cluster_token = tokens.read(state / tokens.CLUSTER_TOKEN_FILE)
            # The real worker is held still so that the other host asks first.
            os.kill(worker.pid, signal.SIGSTOP)
            os.killpg(controller.pid, signal.SIGKILL)
            controller.wait(30)
            controller = start_controller(state, address)
            refused = wait_until(lambda: _join_refusal(ctx, address, wid, cluster_token),
                                 what="an answer to a join under the stopped worker's id")
            assert isinstance(refused, ConflictError), refused
            assert "restarted" in str(refused)
            os.kill(worker.pid, signal.SIGCONT)
            # The real worker joins again (proving it holds its credential) and registers.
            wait_until(lambda: _workers(ctx).get(wid) == where,
                       what="the real worker registered again")
            again = _join_refusal(ctx, address, wid, cluster_token)
            assert isinstance(again, ConflictError), again  # live now: refused still
            job = iris.submit(["true"])  # and the real worker is commanded
            assert job.wait(timeout=120)["state"] == "succeeded"
            assert _workers(ctx) == {wid: where}
        # Refused once (the restarted controller knows no credential), then let in at its
        # first join, by its proof: never made to wait for the id to be freed.
        said = log.read_text()
        assert "not known here" in said, said[-3000:]
        assert "before the controller restarted" not in said, said[-3000:]
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        for proc in (controller, worker):
            _kill_group(proc.pid)
            proc.wait(30)
