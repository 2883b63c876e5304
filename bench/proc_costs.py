"""Bench: the CPU each controller-side and CLI process costs, start to answer (issue 33).

    python -m bench.proc_costs [--quick] [--runs N] [--idle S]

Per kind, the CPU-s (user + system, the process and the children it waited for) of:
`iris --help`; `iris job list` against a live controller; `iris controller serve` from exec
to its dashboard line (serving), then its idle CPU in ms per second over `--idle` seconds;
and one checkpoint packed by the niced child (`pack_in_child`, as the controller does).
Figures are medians over `--runs`. Last line: one JSON object (bench/ab.py reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu_of(argv: list[str], env: dict) -> float:
    before = _children_cpu()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return _children_cpu() - before


def _proc_cpu(pid: int) -> float:
    """CPU-s of a live process: its threads' run time in ns (schedstat), plus the threads
    that already ended (stat's whole-process ticks less the live threads' ticks)."""
    total = ticks_live = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            ticks_live += _ticks(Path(f"/proc/{pid}/task/{tid}/stat"))
        except OSError:  # the thread ended meanwhile
            pass
    return total / 1e9 + max(0, _ticks(Path(f"/proc/{pid}/stat")) - ticks_live) / _TICK


def _ticks(stat: Path) -> int:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class _Serve:
    """`iris controller serve` in a state dir, up to its dashboard line."""

    def __init__(self, state: Path, env: dict):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "iris", "controller", "serve", "--state-dir", str(state),
             "--dashboard-port", "0"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        self.address = ""
        for line in self.proc.stdout:
            if line.startswith("controller serving at "):
                self.address = line.split()[3]
            if "dashboard:" in line:
                break
        self.start_cpu = _proc_cpu(self.proc.pid)

    def idle_ms_per_s(self, seconds: float) -> float:
        a = _proc_cpu(self.proc.pid)
        time.sleep(seconds)
        return (_proc_cpu(self.proc.pid) - a) / seconds * 1000

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def _pack_cpu(state: Path, root: Path, n: int) -> float:
    from iris.controller.checkpoint.archive import pack_in_child
    from iris.wire.states import DB_NAME

    before = _children_cpu()
    pack_in_child(state / DB_NAME, state, root / f"ck{n}.tar.gz", f"ck{n}", time.time())
    return _children_cpu() - before


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs, 3 s idle")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--idle", type=float, default=None, help="seconds of idle sampled")
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 7)
    idle = args.idle or (3.0 if args.quick else 10.0)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    iris_cli = [sys.executable, "-m", "iris"]
    got: dict[str, list[float]] = {k: [] for k in ("help", "job_list", "serve_start",
                                                   "serve_idle_ms_s", "pack")}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in range(runs):
            got["help"].append(_cpu_of(iris_cli + ["--help"], env))
            state = root / f"state{n}"
            serve = _Serve(state, env)
            try:
                got["serve_start"].append(serve.start_cpu)
                got["serve_idle_ms_s"].append(serve.idle_ms_per_s(idle))
                got["job_list"].append(_cpu_of(iris_cli + ["job", "list", "--address",
                                                           serve.address], env))
            finally:
                serve.stop()
            got["pack"].append(_pack_cpu(state, root, n))
    out = {f"{k}_cpu_s" if not k.endswith("_s") else k: round(statistics.median(v), 3)
           for k, v in got.items()}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
