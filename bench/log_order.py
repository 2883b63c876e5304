"""Benchmark of how a task's stdout and stderr come out merged (issue 18): the order lines
were written in, and what the reader costs. The worker's real reader (iris.worker.output)
against the design it replaced (a thread per pipe), on real processes and FIFOs.

    python -m bench.log_order [--quick]

The last line printed is one JSON object of the figures.

What each figure means:
- late_pct: a task prints N numbered lines alternating stdout and stderr, each flushed,
  with `gap_ms` of its own time between them; late_pct is the share of lines the reader
  hands on after a line that was written later (0 is perfect; a reader that handed on all
  of stdout, then all of stderr, would score ~50). gap 0: as fast as Python prints (~2 us apart), where
  no reader of two pipes can know the order; gap 1 ms: a chatty program on a loaded host.
  runtime_tagged: the task writes through the task runtime's tagged records (what every
  function task does), one_reader: raw output of a command, thread_per_pipe: the old reader.
- flood_mb_s: a task writes 100-byte lines to stdout as fast as it can; MB/s of lines the
  reader hands on (the shipper's own cost is measured by bench/logs.py).
No peer: Ray's log monitor tails one file per stream and merges nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from iris.base.clock import SYSTEM_CLOCK
from iris.worker.output import MergedReader, StreamReader, make_fifo, open_reader

_TASK = """
import sys, time
n, gap = int(sys.argv[1]), float(sys.argv[2]) / 1000
if sys.argv[3] == "tagged":  # what the task runtime does for every function task
    from iris.worker.task_runtime import tag_output
    assert tag_output()
for i in range(n):
    stream = sys.stdout if i % 2 == 0 else sys.stderr
    print(f"{i}", file=stream, flush=True)
    if gap:
        end = time.perf_counter() + gap
        while time.perf_counter() < end:
            pass
"""
_FLOOD = """
import os, sys
line = b"x" * 99 + b"\\n"
block = line * 640
for _ in range(int(sys.argv[1]) // len(block)):
    os.write(1, block)
"""


def _run(script: str, args: list[str], one_reader: bool) -> tuple[list[tuple[str, bytes]],
                                                                    float]:
    """Run `script` with its stdout and stderr on FIFOs read by one reader or two."""
    got: list[tuple[str, bytes]] = []
    lock = threading.Lock()

    def on_output(stream: str, line: bytes, ts: float) -> None:
        with lock:
            got.append((stream, line))

    with tempfile.TemporaryDirectory() as tmp:
        fifos = [Path(tmp) / "stdout.fifo", Path(tmp) / "stderr.fifo"]
        child_fds = [make_fifo(f) for f in fifos]
        reader_fds = [open_reader(f) for f in fifos]
        pipes = list(zip(("stdout", "stderr"), reader_fds, strict=True))
        readers = ([MergedReader(pipes, on_output, SYSTEM_CLOCK)] if one_reader else
                   [StreamReader(name, fd, on_output, SYSTEM_CLOCK) for name, fd in pipes])
        for reader in readers:  # reading (and waiting in poll) before the task writes
            reader.start()
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=child_fds[0],
                                stderr=child_fds[1], stdin=subprocess.DEVNULL,
                                env={**os.environ, "IRIS_ATTEMPT_DIR": tmp})
        for fd in child_fds:
            os.close(fd)
        proc.wait()
        for reader in readers:
            reader.join()
        return got, time.perf_counter() - started


def late_pct(n: int, gap_ms: float, one_reader: bool, tagged: bool = False) -> float:
    got, _ = _run(_TASK, [str(n), str(gap_ms), "tagged" if tagged else "raw"], one_reader)
    order = [int(line) for _, line in got]
    assert sorted(order) == list(range(n)), "lines lost"
    late, newest = 0, -1
    for i in order:
        late += i < newest
        newest = max(newest, i)
    return 100.0 * late / n


def flood_mb_s(nbytes: int, one_reader: bool) -> float:
    got, seconds = _run(_FLOOD, [str(nbytes)], one_reader)
    return sum(len(line) for _, line in got) / seconds / 1e6


# (one reader for both pipes, task runtime tags its writes, label): the worker today (Python
# tasks tagged, raw commands read in order of arrival), and the thread-per-pipe design before.
_READERS = ((True, True, "runtime_tagged"), (True, False, "one_reader"),
            (False, False, "thread_per_pipe"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer lines (under a minute)")
    args = parser.parse_args(argv)
    n, runs = (2000, 3) if args.quick else (20000, 5)
    figures: dict[str, float | int] = {"lines": n, "runs": runs}
    for gap in (0.0, 1.0):
        for one, tagged, label in _READERS:
            pcts = sorted(round(late_pct(n if gap == 0 else n // 10, gap, one, tagged), 2)
                          for _ in range(runs))
            key = f"late_pct_gap{gap:g}ms_{label}"
            figures[key] = pcts[len(pcts) // 2]
            print(f"gap {gap:g} ms, {label:>15}: {figures[key]:6.2f}% of lines handed on after "
                  f"a later one (median of {runs}; runs {pcts})", flush=True)
    mb = 50_000_000 if args.quick else 400_000_000
    for _ in range(runs):  # alternating, so load hits both alike; the best of each
        for one, label in ((True, "one_reader"), (False, "thread_per_pipe")):
            key = f"flood_mb_s_{label}"
            figures[key] = max(figures.get(key, 0.0), round(flood_mb_s(mb, one), 1))
    for label in ("one_reader", "thread_per_pipe"):
        print(f"{label:>15} hands on {figures['flood_mb_s_' + label]} MB/s of 100-byte lines "
              f"(best of {runs})", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
