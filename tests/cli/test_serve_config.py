"""`iris controller serve --config` as an operator runs it: a real subprocess whose YAML
config's scale group (provider: local) grows from zero for a job and shrinks back when idle,
and a bad config refused at start with a message naming the key.

The autoscaler's timings come from the config's `autoscaler:` section (seconds, not the
minutes production uses), so the whole file runs in well under a minute.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import iris
from iris.actors.keys import CONTROLLER_KEY

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONPATH": ROOT}
_START_TIMEOUT_S = 60.0
_WAIT_S = 120.0

CONFIG = """\
name: e2e
controller:
  address: tcp://127.0.0.1:0
storage:
  log_dir: {log_dir}
autoscaler:
  scale_up_delay_s: 0.2
  scale_down_delay_s: 1
  poll_interval_s: 0.5
regions:
  east:
    zones: [east-a]
    scale_groups:
      cpu:
        accelerator_type: cpu
        hosts_per_slice: 1
        min_slices: 0
        max_slices: 2
        provider: local
"""


def wait_on_fifo(path: str) -> str:
    """A task that runs until the test writes a line into the FIFO at `path` (an event, not
    a poll: opening a FIFO for reading blocks until a writer opens it)."""
    with open(path) as fifo:
        return fifo.readline().strip()


def _serve(config: Path, state_dir: Path, stderr_path: Path) -> subprocess.Popen:
    stderr = stderr_path.open("w")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "iris", "controller", "serve", "--config", str(config),
             "--state-dir", str(state_dir), "--bind", "tcp://127.0.0.1:0",
             "--dashboard-port", "0"],
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
            env=ENV, start_new_session=True)
    finally:
        stderr.close()  # the child holds its own copy


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, as an operator's Ctrl-C or systemd would: the controller stops its Region
    actor, whose LocalProvider stops the slice workers. SIGKILL the group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    proc.stdout.close()


@pytest.fixture
def served(tmp_path) -> Iterator[str]:
    """The controller serving CONFIG; yields its address (read from its own stdout)."""
    config = tmp_path / "cluster.yaml"
    config.write_text(CONFIG.format(log_dir=tmp_path / "logs"))
    proc = _serve(config, tmp_path / "state", tmp_path / "serve.err")
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # keep draining: the child must never block on a full pipe
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=_START_TIMEOUT_S)
            assert line is not None, (tmp_path / "serve.err").read_text()[-3000:]
            if line.startswith("controller serving at "):
                yield line.split()[3]
                break
    finally:
        _stop(proc)


def _cli(address: str, *args: str) -> object:
    done = subprocess.run([sys.executable, "-m", "iris", "--address", address, *args],
                          capture_output=True, text=True, env=ENV, timeout=_WAIT_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _capacity(ctx) -> dict:
    """The one region's autoscaler report, as the controller last polled it."""
    snapshot = ctx.node.call(ctx.address, CONTROLLER_KEY, "snapshot").result(60)
    return (snapshot.get("capacity") or [{"groups": [{"slices": []}], "decisions": []}])[0]


def _decided(ctx, action: str, slice_id: str) -> dict | None:
    return next((d for d in _capacity(ctx)["decisions"]
                 if d["action"] == action and d["slice_id"] == slice_id), None)


def test_serve_config_job_runs_on_a_slice_the_autoscaler_creates_then_it_scales_down(
        served, tmp_path, wait_until):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    with iris.connect(served) as ctx:
        assert _capacity(ctx)["groups"][0]["slices"] == []  # min_slices 0: nothing yet
        job = iris.submit(wait_on_fifo, str(fifo), resources=iris.Resources(cpu=1))
        wait_until(lambda: job.status()["state"] == "running", _WAIT_S, "the task running")
        worker_id = job.tasks()[0]["worker_id"]

        workers = {w["worker_id"]: w for w in _cli(served, "worker", "list", "--json")}
        assert workers[worker_id]["region"] == "east"
        slice_id = workers[worker_id]["attributes"]["slice_id"]
        assert workers[worker_id]["attributes"]["scale_group"] == "cpu"
        created = wait_until(lambda: _decided(ctx, "create", slice_id), _WAIT_S,
                             "the create decision")
        assert created["group"] == "cpu" and created["zone"] == "east-a"

        with open(fifo, "w") as gate:
            gate.write("released\n")
        assert job.result(timeout=_WAIT_S) == "released"
        status = _cli(served, "cluster", "status", "--json")
        assert status["jobs"] == {"succeeded": 1}
        [group] = status["scale_groups"]  # the autoscaled group, as the dashboard sees it
        assert (group["region"], group["group"], group["max"]) == ("east", "cpu", 2)

        # scale_down_delay_s: 1 from the YAML (the default is 300 s): the idle slice goes.
        deleted = wait_until(lambda: _decided(ctx, "delete", slice_id), _WAIT_S,
                             "the idle slice deleted")
        assert deleted["reason"].startswith("idle")
        wait_until(lambda: _capacity(ctx)["groups"][0]["slices"] == [], _WAIT_S,
                   "no slices left")


def _replace(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


BAD_CONFIGS = {
    "unknown_key": (
        lambda c: _replace(c, "        max_slices: 2\n", "        max_slice: 2\n"),
        "regions.east.scale_groups.cpu.max_slice: unknown key (did you mean 'max_slices'?)"),
    "two_providers": (
        lambda c: c + ("      sim:\n        accelerator_type: cpu\n        hosts_per_slice: 1\n"
                       "        provider: simulated\n"),
        "regions.east.scale_groups: one region's groups must use one provider, "
        "got local, simulated"),
    "autoscaler_typo": (
        lambda c: _replace(c, "  scale_up_delay_s: 0.2\n", "  scale_up_delay: 0.2\n"),
        "autoscaler.scale_up_delay: unknown key (did you mean 'scale_up_delay_s'?)"),
    "autoscaler_backoff_inverted": (
        lambda c: _replace(c, "autoscaler:\n",
                           "autoscaler:\n  backoff_initial_s: 10\n  backoff_max_s: 5\n"),
        "autoscaler: AutoscalerConfig.backoff_max_s: must be >= backoff_initial_s"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_serve_config_bad_config_exits_nonzero_naming_the_key(case, tmp_path):
    edit, message = BAD_CONFIGS[case]
    config = tmp_path / "cluster.yaml"
    config.write_text(edit(CONFIG.format(log_dir=tmp_path / "logs")))
    done = subprocess.run(
        [sys.executable, "-m", "iris", "controller", "serve", "--config", str(config),
         "--state-dir", str(tmp_path / "state"), "--dashboard-port", "0"],
        capture_output=True, text=True, env=ENV, timeout=_WAIT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "serving at" not in done.stdout  # refused before anything was served
