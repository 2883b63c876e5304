"""The operator's day, through the `iris` CLI as subprocesses, against the fake GCP APIs.

`cluster start` makes the controller VM through the real google-cloud-compute client (the
fake runs `iris controller serve` here with what the VM's startup script says); `slice
create` makes a TPU slice through the real google-cloud-tpu client (the fake starts its
worker); a job runs on it; `vm logs` shows the job's output; `slice terminate --all` and
`cluster stop` leave both fake inventories empty and no process running.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import iris
from tests.cli_fork import CliServer
from tests.operate.gcp_world import ROOT, GcpWorld

pytestmark = pytest.mark.timeout(600)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp: Path, name: str = "day") -> Path:
    port, dashboard = _free_port(), _free_port()
    path = tmp / "cluster.yaml"
    path.write_text(f"""
name: {name}
controller:
  address: tcp://127.0.0.1:{port}
  state_dir: {tmp / 'vm-disk' / 'iris'}
  vm:
    zone: us-central2-b
    dashboard_port: {dashboard}
storage:
  log_dir: {tmp / 'logs'}
gcp:
  project: test-proj
regions:
  us-central2:
    zones: [us-central2-b]
    scale_groups:
      v5e-4:
        accelerator_type: tpu
        accelerator_variant: v5litepod-4
        max_slices: 1
""")
    return path


_cli: list[CliServer] = []


@pytest.fixture(scope="module", autouse=True)
def cli_server():
    """Each `iris` command below is a process of its own, forked from one interpreter that
    imported the CLI and the Google clients once (tests/cli_fork.py): ~2 CPU-s a command
    less."""
    from tests.conftest import shared_process_env

    server = CliServer(("iris.cli.operate", "iris.controller.providers.gcp_compute",
                        "iris.controller.providers.gcp_tpu"),
                       env={**shared_process_env(), "PYTHONPATH": str(ROOT)})
    _cli.append(server)
    yield server
    _cli.remove(server)
    server.close()


def _iris(world: GcpWorld, *argv: str, check: bool = True,
          timeout: float = 300) -> subprocess.CompletedProcess:
    try:
        out = _cli[0].run(list(argv), {**os.environ, "PYTHONPATH": str(ROOT), **world.env},
                          timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # say what the command and the fake VMs said
        logs = {path.name: path.read_text()[-3000:]
                for path in sorted((world.root / "processes").rglob("*.log"))}
        raise AssertionError(f"{argv} timed out after {timeout} s; its stderr:\n{exc.stderr}"
                             f"\nthe fake cloud's processes: {logs}") from exc
    if check:
        assert out.returncode == 0, (argv, out.stdout, out.stderr)
    return out


def _json(world: GcpWorld, *argv: str) -> object:
    return json.loads(_iris(world, *argv, "--json").stdout)


def test_operator_day_start_slice_job_logs_terminate_stop(tmp_path, wait_until):
    with GcpWorld(tmp_path) as world:
        config = str(_config(tmp_path))
        cluster = ("cluster", "--config", config)

        started = _json(world, *cluster, "start")
        address = started["address"]
        assert started["created"] and started["dashboard"].startswith("http://127.0.0.1:")
        [vm] = world.compute.instances()
        assert vm["name"] == "day-controller" and vm["labels"]["iris-cluster"] == "day"
        # Started twice: the VM is found, not made again.
        assert _json(world, *cluster, "start")["created"] is False
        assert len(world.compute.instances()) == 1

        status = _json(world, *cluster, "status")
        assert status["answering"] and status["vm"]["status"] == "RUNNING"
        assert [(g["group"], g["max"], g["slices"]) for g in status["scale_groups"]] == \
            [("v5e-4", 1, "")]

        made = _json(world, *cluster, "slice", "create", "--scale-group", "v5e-4")
        slice_id = made["slice_id"]
        assert made["state"] == "READY" and made["group"] == "v5e-4"
        # Within its group's bounds: a second one is refused, naming the bound.
        over = _iris(world, *cluster, "slice", "create", "--scale-group", "v5e-4", check=False)
        assert over.returncode == 2 and "at max_slices 1" in over.stderr
        assert [s["slice_id"] for s in _json(world, *cluster, "slice", "list")] == [slice_id]
        assert _json(world, *cluster, "slice", "get", slice_id)["zone"] == "us-central2-b"

        host = f"{slice_id}-w0"
        wait_until(lambda: any(w["worker_id"] == host for w in _json(
            world, "worker", "list", "--address", address)), 180, "the slice's worker")
        ran = _iris(world, "job", "run", "--address", address, "--tpu", "v5litepod-4", "--",
                    "python", "-c", "print('hello from the slice')")
        assert "hello from the slice" in ran.stdout

        # The autoscaler adopted the hand-made slice: counted once, none made beside it.
        # (The autoscaler sees it at its next provider poll, every 2 s.)
        wait_until(lambda: [(g["group"], g["ready"]) for g in _json(
            world, "cluster", "status", "--address", address)["scale_groups"]] == [
            ("v5e-4", 1)], 120, "the autoscaler counting the hand-made slice")
        assert len(world.tpu.requests_for("POST", "/nodes")) == 1
        regions = _json(world, *cluster, "status")["regions"]
        assert [(g["region"], g["group"], g["ready"]) for g in regions] == \
            [("us-central2", "v5e-4", 1)]

        vms = {r["vm_id"]: r for r in _json(world, *cluster, "vm", "status")}
        assert set(vms) == {"day-controller", host} and vms[host]["slice"] == slice_id
        assert _json(world, *cluster, "vm", "get", host)["role"] == "worker"
        logs = _iris(world, *cluster, "vm", "logs", host).stdout
        assert "hello from the slice" in logs
        assert "controller started" in _iris(world, *cluster, "vm", "logs",
                                             "day-controller").stdout

        # A script without a terminal must say --yes: nothing is deleted without it.
        refused = _iris(world, *cluster, "slice", "terminate", "--all", check=False)
        assert refused.returncode == 2 and "--yes" in refused.stderr
        assert len(world.tpu.nodes()) == 1
        assert _json(world, *cluster, "slice", "terminate", "--all", "--yes")["deleted"] == \
            [slice_id]
        assert world.tpu.nodes() == []

        stopped = _json(world, *cluster, "stop", "--yes")
        assert stopped["vm_deleted"] is True
        assert world.compute.instances() == [] and world.tpu.nodes() == []
        assert world.processes.running() == []


def test_cluster_restart_keeps_the_controller_state(tmp_path):
    with GcpWorld(tmp_path) as world:
        cluster = ("cluster", "--config", str(_config(tmp_path, "kept")))
        address = _json(world, *cluster, "start")["address"]
        with iris.connect(address):
            job = iris.submit(["true"], name="kept", resources=iris.Resources(tpu="v5litepod-4"))
        assert _json(world, *cluster, "restart")["reset"] is True
        assert [j["job_id"] for j in _json(world, "job", "list", "--address", address)] == \
            [job.job_id]
        # Whatever the autoscaler made for the job meanwhile goes with the cluster.
        _json(world, *cluster, "stop", "--yes")
        assert world.compute.instances() == [] and world.tpu.nodes() == []
        assert world.processes.running() == []


def test_bad_config_is_refused_before_any_cloud_call(tmp_path):
    with GcpWorld(tmp_path) as world:
        path = _config(tmp_path)
        path.write_text(path.read_text().replace("max_slices", "max_slice"))
        out = _iris(world, "cluster", "--config", str(path), "start", check=False)
        assert out.returncode == 2
        assert "max_slice: unknown key (did you mean 'max_slices'?)" in out.stderr
        assert world.compute.requests == [] and world.tpu.requests == []


def test_controller_run_local_runs_the_configs_autoscaler_here(tmp_path, wait_until):
    with GcpWorld(tmp_path) as world:
        path = _config(tmp_path, "here")
        text = path.read_text().replace("max_slices: 1", "min_slices: 1\n        max_slices: 1")
        vm = text[text.index("  vm:"):text.index("storage:")]
        path.write_text(text.replace(vm, ""))  # no VM: the controller runs here
        log = open(tmp_path / "run-local.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [sys.executable, "-m", "iris", "cluster", "--config", str(path), "controller",
             "run-local", "--state-dir", str(tmp_path / "state"), "--dashboard-port", "0"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **world.env})
        try:
            # min_slices 1: the config's autoscaler, running here, makes the slice.
            wait_until(world.tpu.nodes, 180, "the autoscaler's slice",
                       explain=lambda: (tmp_path / "run-local.log").read_text()[-2000:])
            [node] = world.tpu.nodes()
            assert node["labels"]["iris-cluster"] == "here"
            assert world.compute.instances() == []  # no VM: the controller runs here
            # The top-level forms, --config after the verb.
            assert _json(world, "controller", "status", "--config", str(path))["answering"]
            [row] = _json(world, "slice", "list", "--config", str(path))
            assert row["group"] == "v5e-4"
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
        # Without a controller VM the controller runs here (here in the foreground, ended
        # above): stopping the cluster deletes its cloud slices, and no VM is asked for.
        stopped = _json(world, "cluster", "--config", str(path), "stop", "--yes")
        assert stopped["slices_deleted"] == [row["slice_id"]] and stopped["failed"] == []
        assert stopped["controller"]["how"] == "not running"
        assert world.tpu.nodes() == [] and world.compute.requests == []
