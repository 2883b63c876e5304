"""A GCP project on this machine: the fake Compute Engine and TPU servers, with real processes.

When the fake Compute server finishes inserting the controller VM, `iris controller serve`
starts here with the values the VM's rendered startup script carries (its bind, state dir,
dashboard port; the config from the instance metadata); a reset restarts it on the same
state directory, a delete stops it. When the fake TPU server creates a node, each of its
hosts gets an `iris worker` started as deploy/worker-startup.sh would start it; deleting the
node stops them. Every process is started in its own session and killed at the end.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

from aiohttp import web

from iris.controller.providers.gcp_compute import CONFIG_KEY
from tests.providers.fake_compute_server import FakeComputeServer
from tests.providers.fake_tpu_server import FakeTpuServer

ROOT = Path(__file__).resolve().parents[2]
_ASSIGN = re.compile(r"^(IRIS_[A-Z_]+)=(.*)$", re.M)


def script_values(script: str) -> dict[str, str]:
    """The IRIS_* assignments at the top of a rendered startup script, unquoted."""
    return {k: (shlex.split(v) or [""])[0] for k, v in _ASSIGN.findall(script)
            if "{{" not in v and "$" not in v}


class Processes:
    """Children started for the fake cloud, by key, each in its own session."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env
        self.procs: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()

    def start(self, key: str, argv: list[str]) -> None:
        log_path = self.root / f"{key}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "iris", *argv], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    env={**os.environ, "PYTHONPATH": str(ROOT), **self.env})
        with self._lock:
            self.procs[key] = proc

    def stop(self, key: str) -> None:
        with self._lock:
            proc = self.procs.pop(key, None)
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()

    def running(self) -> list[str]:
        with self._lock:
            return sorted(k for k, p in self.procs.items() if p.poll() is None)

    def stop_all(self) -> None:
        for key in list(self.procs):
            self.stop(key)


class WorkerStartingTpuServer(FakeTpuServer):
    """The fake TPU server, whose nodes run a worker per host here."""

    processes: Processes | None = None

    async def _create(self, request: web.Request) -> web.Response:
        reply = await super()._create(request)
        if reply.status == 200:
            body = await request.json()
            v = script_values(body["metadata"]["startup-script"])
            slice_id = v["IRIS_SLICE_ID"]
            for index, _ in enumerate(self.node(slice_id)["networkEndpoints"]):
                host = f"{slice_id}-w{index}"
                self.processes.start(f"hosts/{host}", [
                    "worker", "--controller", v["IRIS_CONTROLLER"], "--region",
                    v["IRIS_REGION"], "--worker-id", host, "--work-dir",
                    str(self.processes.root / "hosts" / host), "--preemption-notice", "off",
                    "--attr", f"slice_id={slice_id}", "--attr",
                    f"scale_group={v['IRIS_SCALE_GROUP']}", "--attr", f"zone={v['IRIS_ZONE']}",
                    "--attr", f"cluster={v['IRIS_CLUSTER']}", "--attr",
                    f"accelerator_type={v['IRIS_ACCELERATOR']}", "--attr",
                    f"host_index={index}"])
        return reply

    async def _delete(self, request: web.Request) -> web.Response:
        node = request.match_info["node"]
        for key in [k for k in self.processes.running() if k.startswith(f"hosts/{node}-w")]:
            self.processes.stop(key)
        return await super()._delete(request)


class GcpWorld:
    """`with GcpWorld(tmp) as world:` the fakes up, `world.env` for a CLI pointed at them."""

    def __init__(self, root: Path):
        self.root = root
        self.tpu = WorkerStartingTpuServer()
        self.compute = FakeComputeServer(on_insert=self._vm_up, on_delete=self._vm_down,
                                         on_reset=self._vm_reset)
        self.processes = Processes(root / "processes", {})

    def __enter__(self) -> GcpWorld:
        self.tpu.__enter__()
        self.compute.__enter__()
        self.env = {"IRIS_GCP_TPU_ENDPOINT": self.tpu.url,
                    "IRIS_GCP_COMPUTE_ENDPOINT": self.compute.url}
        self.processes.env = self.env
        self.tpu.processes = self.processes
        return self

    def __exit__(self, *exc: object) -> None:
        self.processes.stop_all()
        self.compute.__exit__(*exc)
        self.tpu.__exit__(*exc)

    def _vm_up(self, instance: dict) -> None:
        items = {i["key"]: i["value"] for i in instance["metadata"]["items"]}
        v = script_values(items["startup-script"])
        config = self.root / "vm" / instance["name"] / "cluster.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(items[CONFIG_KEY])
        self.compute.append_serial(instance["name"], "iris startup: controller started\n")
        self.processes.start(f"vm/{instance['name']}", [
            "controller", "serve", "--state-dir", v["IRIS_STATE_DIR"], "--bind", v["IRIS_BIND"],
            "--config", str(config), "--dashboard-port", v["IRIS_DASHBOARD_PORT"]])

    def _vm_down(self, instance: dict) -> None:
        self.processes.stop(f"vm/{instance['name']}")

    def _vm_reset(self, instance: dict) -> None:
        self._vm_down(instance)
        self._vm_up(instance)
