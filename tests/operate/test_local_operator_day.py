"""An operator's first day off GCP: a config whose scale group uses `provider: local`, driven
through the `iris` CLI as subprocesses, on real processes.

start -> status -> a job that needs a new slice -> slice list / vm status showing it ->
restart (the jobs kept) -> stop, then nothing of the cluster is left: no process in any
process group it started, and no process with its mark in the environment (the controller,
the slice's worker, its watchdog, the task) -> start twice (the second: one clear line).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from iris.cli.cluster_dir import cluster_dir, marked
from iris.controller.config import load_config
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(600)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp: Path) -> Path:
    path = tmp / "cluster.yaml"
    path.write_text(f"""
name: offgcp
controller:
  address: tcp://127.0.0.1:{_free_port()}
  state_dir: {tmp / 'cluster'}
storage:
  log_dir: {tmp / 'logs'}
autoscaler:
  scale_up_delay_s: 0
  poll_interval_s: 0.5
regions:
  here:
    zones: [here-a]
    scale_groups:
      cpus:
        accelerator_type: cpu
        hosts_per_slice: 1
        max_slices: 2
        provider: local
""")
    return path


def _iris(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "iris", *argv], capture_output=True,
                         text=True, timeout=300, stdin=subprocess.DEVNULL,
                         env={**os.environ, "PYTHONPATH": ROOT})
    if check:
        assert out.returncode == 0, (argv, out.stdout, out.stderr)
    return out


def _json(*argv: str) -> object:
    return json.loads(_iris(*argv, "--json").stdout)


def _groups(pids) -> dict[int, int]:
    """pid -> process group, for those still running."""
    out = {}
    for pid in pids:
        try:
            out[pid] = os.getpgid(pid)
        except ProcessLookupError:
            continue
    return out


def _in_groups(pgids: set[int]) -> list[int]:
    """Live (non-zombie) processes whose process group is one of `pgids`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X") and int(fields[2]) in pgids:
            found.append(int(entry.name))
    return found


def _kill_marked(mark: str) -> None:
    for pid in marked(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_a_local_provider_cluster_through_its_day(tmp_path, wait_until):
    config = str(_config(tmp_path))
    mark = str(cluster_dir(load_config(Path(config))))
    cluster = ("cluster", "--config", config)
    try:
        started = _json(*cluster, "start")
        address = started["address"]
        assert started["cluster_dir"] == mark == str(tmp_path / "cluster")
        assert started["log"] == str(tmp_path / "cluster" / "controller.log")
        assert started["workers"] == 0 and started["pid"] in marked(mark)

        status = _json(*cluster, "status")
        assert status["answering"] and status["controller"]["pid"] == started["pid"]
        assert [(g["group"], g["provider"], g["slices"]) for g in status["scale_groups"]] == \
            [("cpus", "local", "")]
        assert _json("slice", "list", "--config", config) == []

        # A job that needs a new slice: the autoscaler makes one, as the config says.
        ran = _iris("job", "run", "--address", address, "--", "python", "-c",
                    "print('hello from a local slice')")
        assert "hello from a local slice" in ran.stdout
        [row] = wait_until(lambda: [r for r in _json("slice", "list", "--config", config)
                                    if r["state"] == "READY"], 60, "the slice READY")
        assert (row["group"], row["zone"], row["region"]) == ("cpus", "here-a", "here")
        host = f"{row['slice_id']}-h0"
        vms = _json(*cluster, "vm", "status")
        assert [(v["vm_id"], v["role"], v["slice"], v["state"]) for v in vms] == \
            [(host, "worker", row["slice_id"], "READY")]
        assert vms[0]["address"] == row["hosts"] and row["hosts"].startswith("tcp://")
        assert _json(*cluster, "vm", "get", host)["slice"] == row["slice_id"]
        assert "hello from a local slice" in _iris(*cluster, "vm", "logs", host).stdout
        [job] = _json("job", "list", "--address", address)

        restarted = _json(*cluster, "restart")
        assert restarted["jobs_kept"] == 1 and restarted["pid"] != started["pid"]
        assert [j["job_id"] for j in _json("job", "list", "--address", address)] == \
            [job["job_id"]]

        # A task running on a new slice when the cluster stops.
        _iris("job", "run", "--address", address, "--no-wait", "--", "sleep", "600")
        running = wait_until(lambda: (lambda m: m if any(c == "sleep 600" for c in m.values())
                                      else None)(marked(mark)), 120, "the task running")
        kinds = {"controller serve": 0, "iris worker": 0, "iris.worker.watchdog": 0,
                 "sleep 600": 0}
        for command in running.values():
            for kind in kinds:
                kinds[kind] += kind in command
        assert all(kinds.values()), running  # every kind of process carries the mark
        pgids = set(_groups(running).values())

        stopped = _json(*cluster, "stop", "--yes")
        assert stopped["failed"] == [] and len(stopped["slices_deleted"]) == 1
        assert stopped["controller"]["stopped"] and stopped["controller"]["how"] == "SIGTERM"
        assert marked(mark) == {}
        assert _in_groups(pgids) == []
        # Ours no longer runs; its port may already serve another test's cluster (the
        # address answering is then not ours), so the controller's own record is asked.
        after = _json(*cluster, "status")
        assert after["controller"]["running"] is False and after["controller"]["pid"] is None

        first = _json(*cluster, "start")
        second = _iris(*cluster, "start", check=False)
        assert second.returncode == 2
        [line] = second.stderr.strip().splitlines()  # one line, and nothing started
        assert line.startswith("iris: cluster offgcp is already running: controller pid "
                               f"{first['pid']} at {address}")
        assert first["pid"] in marked(mark)  # (it resumes the sleep: jobs outlive a stop)
        _json(*cluster, "stop", "--yes")
        assert marked(mark) == {}
    finally:
        _iris(*cluster, "stop", "--yes", check=False)
        _kill_marked(mark)


def test_the_cluster_dir_defaults_under_iris_home(tmp_path, monkeypatch):
    config = _config(tmp_path)
    config.write_text(config.read_text().replace(f"  state_dir: {tmp_path / 'cluster'}\n", ""))
    monkeypatch.setenv("IRIS_HOME", str(tmp_path / "home"))
    assert cluster_dir(load_config(config)) == tmp_path / "home" / "clusters" / "offgcp"
