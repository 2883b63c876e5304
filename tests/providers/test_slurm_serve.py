"""`iris controller serve --config` with a Slurm region, as an operator on a login node runs
it: a real subprocess whose YAML names the Slurm cluster (real daemons); a job submitted to
it runs in an allocation the controller made through sbatch, with the worker's token read
from the 0600 file the controller wrote, and the allocation is cancelled when idle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import iris
from tests.providers.conftest import _CERT_VARS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = """\
name: login
controller: {{address: "tcp://127.0.0.1:0"}}
storage: {{log_dir: {logs}}}
autoscaler: {{scale_up_delay_s: 0.2, scale_down_delay_s: 1, poll_interval_s: 0.5}}
regions:
  campus:
    zones: [main]
    slurm: {{conf: {conf}, work_dir: {work}, worker_host: 127.0.0.1, export_env: {export}}}
    scale_groups:
      node:
        provider: slurm
        accelerator_type: cpu
        hosts_per_slice: 1
        max_slices: 1
        slurm: {{cpus_per_node: 1, mem_per_node: 500M}}
"""


def test_controller_serve_config_runs_a_job_in_a_slurm_allocation(slurm, tmp_path, wait_until):
    export = [v for v in _CERT_VARS if v in os.environ]
    config = tmp_path / "cluster.yaml"
    config.write_text(CONFIG.format(logs=tmp_path / "logs", conf=slurm.conf,
                                    work=tmp_path / "shared", export=export))
    proc = subprocess.Popen(
        [sys.executable, "-m", "iris", "controller", "serve", "--config", str(config),
         "--state-dir", str(tmp_path / "state"), "--bind", "tcp://127.0.0.1:0",
         "--dashboard-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": ROOT},
        start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert "controller serving at" in line, line
        address = line.split(" serving at ")[1].split()[0]
        with iris.connect(address):
            job = iris.submit(lambda: os.environ.get("SLURM_JOB_ID", "none"),
                              resources=iris.Resources(cpu=1))
            assert job.result(timeout=180) == "none"  # the task's env is its own, not Slurm's
            worker = job.tasks()[0]["worker_id"]
        token = Path(tmp_path / "shared" / "login" / "cluster.token")
        assert oct(token.stat().st_mode & 0o777) == "0o600"
        allocations = [j for j in slurm.jobs() if worker.startswith(j["name"])]
        assert len(allocations) == 1
        wait_until(lambda: not slurm.active_jobs(), 120, "the idle allocation cancelled")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        proc.stdout.close()
