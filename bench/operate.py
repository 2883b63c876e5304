"""Benchmark of an operator's verbs off GCP (issue 27): start and stop a cluster on this machine.

    python -m bench.operate [--quick] [--rounds N]

Not a test: it asserts nothing. Real processes, through the `iris` CLI as an operator types
it, with a config whose scale group uses `provider: local`:

- start_s: `iris cluster --config F start` until it returns (the controller answers);
- first_job_s: `iris job run -- true` on the new cluster: the autoscaler makes a local slice
  (scale_up_delay_s 0), its worker registers, the task runs (includes the slice's boot);
- stop_s: `iris cluster --config F stop --yes` with that slice up: the slice's worker says
  goodbye, the controller stops, nothing of the cluster is left;
- each CLI's own start-up (`iris --version`) is measured too, as the floor of every verb.

Peer, same run: Ray's `ray start --head` and `ray stop` (a head node on this machine), when
Ray is installed (the bench extra). --quick: 2 rounds; default 5. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._report import fmt, peer_installed, step

_CONFIG = """\
name: bench-{n}
controller:
  address: tcp://127.0.0.1:{port}
  state_dir: {root}/cluster
storage:
  log_dir: {root}/logs
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
        max_slices: 1
        provider: local
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed(argv: list[str], env: dict | None = None) -> float:
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                         stdin=subprocess.DEVNULL, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return time.monotonic() - started


def iris_round(n: int) -> dict:
    iris = [sys.executable, "-m", "iris"]
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        config = Path(tmp, "cluster.yaml")
        config.write_text(_CONFIG.format(n=n, port=port, root=tmp))
        cluster = [*iris, "cluster", "--config", str(config)]
        out = {"cli_s": _timed([*iris, "--version"])}
        out["start_s"] = _timed([*cluster, "start"])
        try:
            out["first_job_s"] = _timed([*iris, "job", "run", "--address",
                                         f"tcp://127.0.0.1:{port}", "--", "true"])
        finally:
            out["stop_s"] = _timed([*cluster, "stop", "--yes"])
        return out


def ray_round() -> dict | None:
    """None when Ray's head did not come up (it times out on a machine under heavy load):
    the peer's failure must not cost the run its own figures."""
    ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        try:
            start = _timed([ray, "start", "--head", "--port", str(_free_port()),
                            "--num-cpus", "1", "--include-dashboard", "false",
                            "--temp-dir", tmp], env)
        except SystemExit as exc:
            print(f"  ray start failed: {str(exc)[-300:]}", file=sys.stderr)
            start = None
        stop = _timed([ray, "stop", "--force"], env)
        return {"start_s": start, "stop_s": stop} if start is not None else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rounds = 2 if args.quick else args.rounds
    with_ray = peer_installed()
    iris_runs, ray_runs = [], []
    for n in range(rounds):  # alternating, so both see the same machine load
        step(f"iris round {n + 1} of {rounds}")
        iris_runs.append(iris_round(n))
        if with_ray:
            step(f"ray round {n + 1} of {rounds}")
            ray_runs += [r for r in [ray_round()] if r is not None]
    out: dict = {"rounds": rounds}
    for key in ("cli_s", "start_s", "first_job_s", "stop_s"):
        out[f"iris_{key}_p50"] = statistics.median(r[key] for r in iris_runs)
    for key in ("start_s", "stop_s"):
        out[f"ray_{key}_p50"] = statistics.median(r[key] for r in ray_runs) if ray_runs \
            else None
    for key, value in out.items():
        print(f"{key:24} {fmt(value) if isinstance(value, float) else value}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
