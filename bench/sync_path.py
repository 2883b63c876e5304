"""What a 1:1 sync call costs besides its latency: CPU and context switches per call, Iris
against a raw pyzmq echo, interleaved in one run.

    python -m bench.sync_path [--seconds S]

Not the full actor benchmark (bench/actors.py, whose `sync` part this repeats): the figures
here barely move with the machine's load, while the latency does (2-10x on this shared
2-core VM), so they show a change to the call path that the medians cannot. Each side runs
blocks of 200 calls in turn (Iris, raw, Iris, ...); per side it sums the wall time, the user
+ system CPU and the context switches (voluntary and not, of every thread) of the caller's
process and the echoing process over its own blocks. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import time

from bench._call_loops import SMALL
from bench._procs import Children, exit_cleanly_on_signals
from bench.actors import raw_echo

_BLOCK = 200


def _counters(pids: list[int | str]) -> tuple[float, int]:
    """(CPU seconds, context switches) of these processes ("self" for this one) so far."""
    import os

    cpu, switches = 0.0, 0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:  # the whole process: every thread's CPU
            fields = f.read().rsplit(")", 1)[1].split()
        cpu += (int(fields[11]) + int(fields[12])) / tick
        for task in glob.glob(f"/proc/{pid}/task/*/status"):  # switches are per thread
            try:
                with open(task) as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                            switches += int(line.split()[1])
            except FileNotFoundError:  # a thread that ended meanwhile
                pass
    return cpu, switches


class _Side:
    def __init__(self, call, pids: list[int | str]):
        self.call, self.pids = call, pids
        self.times: list[float] = []
        self.cpu = 0.0
        self.switches = 0

    def block(self) -> None:
        cpu0, sw0 = _counters(self.pids)
        clock = time.perf_counter
        for _ in range(_BLOCK):
            t0 = clock()
            self.call(SMALL)
            self.times.append(clock() - t0)
        cpu1, sw1 = _counters(self.pids)
        self.cpu += cpu1 - cpu0
        self.switches += sw1 - sw0

    def figures(self, prefix: str) -> dict:
        n = len(self.times)
        return {f"{prefix}median_us": statistics.median(self.times) * 1e6,
                f"{prefix}cpu_us": self.cpu / n * 1e6, f"{prefix}switches": self.switches / n}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="measuring time (6 s)")
    parser.add_argument("--quick", action="store_true", help="2 s (for bench.ab)")
    args = parser.parse_args(argv)
    seconds = 2.0 if args.quick else args.seconds
    exit_cleanly_on_signals()
    import iris

    with Children() as children, raw_echo(children) as raw, iris.local_cluster() as cluster:
        actor = children.spawn(["-m", "bench.actors", "--serve", "echo"],
                               {"IRIS_ADDRESS": cluster.address})
        actor.expect("READY")
        echo = iris.resolve("echo", timeout=60).echo
        mine = _Side(lambda x: echo(x).result(60), ["self", actor.proc.pid])
        floor = _Side(raw, ["self", raw.pid])
        for side in (mine, floor):
            side.block()
            side.times.clear()
            side.cpu, side.switches = 0.0, 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            mine.block()
            floor.block()
        out = {**mine.figures("sync_"), **floor.figures("zmq_sync_")}
        actor.kill()
    out["sync_vs_zmq"] = out["sync_median_us"] / out["zmq_sync_median_us"]
    print(json.dumps({k: round(v, 3) for k, v in out.items()}))


if __name__ == "__main__":
    main()
