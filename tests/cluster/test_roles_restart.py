"""Roles across a controller restart (kill -9), on real processes: credentials live in the
controller's memory, so after a restart every id is free to join for a moment. A host
holding the cluster token that joins under a live worker's id in that moment must get
nothing that commands the real worker once it has joined again.
"""

from __future__ import annotations

import os
import signal

import pytest

import iris
from iris.actors import tokens
from iris.actors.keys import CONTROLLER_KEY, worker_key
from iris.base.errors import PermissionDeniedError
from iris.client.jobs import _controller
from tests.cluster.test_crashes import _kill_group, free_port, start_controller, start_worker

pytestmark = pytest.mark.slow


def _join(ctx, address: str, worker_id: str, token: bytes) -> dict | None:
    try:
        return ctx.node.call(address, CONTROLLER_KEY, "join", (worker_id,), timeout_s=5,
                             auth=token).result(10)
    except iris.IrisError:
        return None


def _workers(ctx) -> set[str]:
    try:
        return {w["worker_id"] for w in _controller(ctx, "list_workers", timeout_s=5.0)}
    except iris.IrisError:
        return set()


def test_a_join_in_the_restart_window_gets_no_command_token_for_the_real_worker(
        tmp_path, wait_until):
    address = f"tcp://127.0.0.1:{free_port()}"
    state = tmp_path / "state"
    controller = start_controller(state, address)
    worker = start_worker(address, tmp_path / "w0")
    try:
        with iris.connect(address) as ctx:
            [real] = wait_until(lambda: _controller(ctx, "list_workers") or None,
                                what="the worker")
            wid, where = real["worker_id"], real["address"]
            cluster_token = tokens.read(state / tokens.CLUSTER_TOKEN_FILE)
            # The real worker is held still so that the other host joins first.
            os.kill(worker.pid, signal.SIGSTOP)
            os.killpg(controller.pid, signal.SIGKILL)
            controller.wait(30)
            controller = start_controller(state, address)
            stolen = wait_until(lambda: _join(ctx, address, wid, cluster_token),
                                what="a join under the stopped worker's id")
            os.kill(worker.pid, signal.SIGCONT)
            # The real worker joins again (once the other holder is silent) and registers.
            wait_until(lambda: wid in _workers(ctx), what="the real worker registered again")
            with pytest.raises(PermissionDeniedError):
                ctx.node.call(where, worker_key(wid), "drain", ("forged",), timeout_s=10,
                              auth=stolen["command_token"]).result(30)
            job = iris.submit(["true"])  # and the real worker is commanded still
            assert job.wait(timeout=120)["state"] == "succeeded"
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        for proc in (controller, worker):
            _kill_group(proc.pid)
            proc.wait(30)
