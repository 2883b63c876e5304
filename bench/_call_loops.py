"""The measuring loops of bench.actors: latency, rate, the 64 MiB echo, the n:n clients'
rounds, and CPU per call. Not the systems measured (bench/actors.py runs Iris, Ray and the
raw pyzmq floor through these same loops).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

SMALL = b"0123456789abcdef"
BIG_BYTES = 64 * 2**20
WINDOW = 1000


class CpuMeter:
    """CPU seconds (user + system) used by this process and by `pids` since construction.

    Under load a process gets only part of a core, so calls/s drifts with the neighbours;
    CPU time per call does not, which makes it the steadier figure to compare.
    """

    def __init__(self, pids: list[int]):
        self._pids = pids
        self._start = self._total()

    def _total(self) -> float:
        mine = os.times()
        total = mine.user + mine.system
        for pid in self._pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def us_per(self, calls: int) -> float:
        return (self._total() - self._start) / calls * 1e6


def measure_latency(call: Callable[[], object], seconds: float, pids: list[int]) -> dict:
    """Median and p99 of one blocking call, in microseconds, after a short warm-up."""
    for _ in range(200):
        call()
    samples: list[float] = []
    clock = time.perf_counter
    cpu = CpuMeter(pids)
    end = clock() + seconds
    while True:
        t0 = clock()
        call()
        t1 = clock()
        samples.append(t1 - t0)
        if t1 >= end:
            break
    samples.sort()
    return {"median_us": statistics.median(samples) * 1e6,
            "p99_us": samples[int(0.99 * (len(samples) - 1))] * 1e6,
            "calls_s": len(samples) / sum(samples), "cpu_us": cpu.us_per(len(samples))}


def measure_paired(a: Callable[[], object], b: Callable[[], object], seconds: float,
                   block: int = 50) -> tuple[float, float]:
    """Medians (us) of two blocking calls timed in alternating blocks of `block` calls: on a
    shared machine whose load moves 2-10x within a minute, figures measured one after the
    other compare two loads as much as two systems; interleaved, both see the same."""
    for _ in range(100):
        a()
        b()
    times: tuple[list[float], list[float]] = ([], [])
    clock = time.perf_counter
    end = clock() + seconds
    while clock() < end:
        for fn, out in ((a, times[0]), (b, times[1])):
            for _ in range(block):
                t0 = clock()
                fn()
                out.append(clock() - t0)
    return statistics.median(times[0]) * 1e6, statistics.median(times[1]) * 1e6


def measure_rate(one_round: Callable[[], object], per_round: int, seconds: float,
                 pids: list[int]) -> dict:
    """Calls/s of back-to-back rounds of `per_round` calls, after two warm-up rounds."""
    one_round()
    one_round()
    rounds = 0
    cpu = CpuMeter(pids)
    start = time.perf_counter()
    while True:
        one_round()
        rounds += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return {"calls_s": rounds * per_round / elapsed,
                    "cpu_us": cpu.us_per(rounds * per_round)}


def measure_big(call: Callable[[bytes], bytes], reps: int) -> dict:
    payload = os.urandom(1024) * (BIG_BYTES // 1024)
    if len(call(payload)) != BIG_BYTES:
        raise RuntimeError("the 64 MiB echo came back with the wrong length")
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call(payload)
        times.append(time.perf_counter() - t0)
    rtt = statistics.median(times)
    return {"gbps": 2 * BIG_BYTES / rtt / 1e9, "rtt_ms": rtt * 1e3}


def pipelined_rounds(send: Callable[[int], object], wait: Callable[[list], object],
                     seconds: float) -> dict:
    """One n:n client's loop: rounds of WINDOW calls (send(i) for i in range) until `seconds`."""
    calls = 0
    start = time.perf_counter()
    while True:
        wait([send(i) for i in range(WINDOW)])
        calls += WINDOW
        end = time.perf_counter()
        if end - start >= seconds:
            return {"calls": calls, "start": start, "end": end}


def combine_clients(reports: list[dict]) -> float:
    """All clients' calls over the span from the first start to the last end (calls/s)."""
    span = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    return sum(r["calls"] for r in reports) / span
