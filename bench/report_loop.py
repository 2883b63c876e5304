"""The node's cost per worker report, without the controller behind it: loop, actor, libzmq.

    python -m bench.report_loop [--quick] [--hosts 2000] [--interval 1.0] [--seconds 10]

Not bench.fleet (a whole controller and its registration, minutes at 10,000 hosts, and a
figure that also carries the controller's ticks and snapshots): here one Node hosts a stub
actor whose `report` is declared as the controller's is (`@requires(WORKER)`, batched, keyed
by worker, late=True, the real `check_report` on the loop thread) and whose batch handler
answers every report with a fixed answer of a report's size, after sleeping --turn-ms
(the controller's turn takes time, and reports queue meanwhile: the batches grow as they
do at a big fleet). A helper process holds
--hosts DEALERs (one TCP connection each, as workers), each with its own credential granted
as a worker's, sending an idle worker's report with real stats every --interval seconds
(random phases, one in flight per host: a host whose answer has not come skips its turn).

Figures, over --seconds after a 3 s warm-up (this process's threads from /proc):
reports_per_s (handled by the stub), us_per_report (all of this process's CPU) and split as
loop_us (the node's loop thread: receive, decode, role check, the report's check, hand-off,
send), actor_us (the stub's turns: take the batch, encode the answers, hand them back),
zmq_us (libzmq's I/O threads: TCP), other_us; reports_per_batch; rss_kb_per_host (this
process's RSS at the end less at the start, over the hosts); skipped (turns a host skipped
because its answer was late). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import zmq

from iris.actors import tokens
from iris.actors.batching import batched
from iris.actors.hosting import actor, requires
from iris.actors.node import Node
from iris.controller.main import tune_gc
from iris.controller.report_check import check_report
from iris.wire import messages

_TICKS = os.sysconf("SC_CLK_TCK")
KEY = "/bench/desk"
ANSWER = {"acks": [], "interval_s": 1.0, "commands": [], "reregister": False}
WARMUP_S = 3.0


def _token(i: int) -> bytes:
    return b"bench-report-token-%08d" % i


def _worker_id(i: int) -> str:
    return f"w-{i:08d}"


@actor
class Desk:
    """Answers reports as the controller's actor declares them, doing nothing with them."""

    def __init__(self, turn_s: float = 0.0) -> None:
        self.reports = self.batches = 0
        self.turn_s = turn_s

    @requires(tokens.WORKER)
    @batched("_reports", check=check_report, late=True, key=lambda r: r.worker_id)
    def report(self, worker_id: str, updates: list, stats: dict | None = None,
               running: list | None = None, usage: list = ()) -> dict:
        return ANSWER

    def _reports(self, msgs: list) -> list:
        self.reports += len(msgs)
        self.batches += 1
        if self.turn_s:
            time.sleep(self.turn_s)  # the controller's turn, during which reports queue up
        return [ANSWER] * len(msgs)


# ---------------------------------------------------------------- the hosts (helper process)


def hosts_main(address: str, n: int, interval: float, seconds: float) -> None:
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, n + 64)
    socks = []
    for _ in range(n):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        socks.append(sock)
    due = [(time.monotonic() + random.random() * interval, i) for i in range(n)]
    heapq.heapify(due)
    waiting = [False] * n
    call_id, skipped, sent = 0, 0, 0
    end = time.monotonic() + seconds
    stats = {"log_shipping": {"max_flush_lag_s": 0.05, "dropped_lines": 0}}
    while True:
        now = time.monotonic()
        if now >= end:
            break
        while due and due[0][0] <= now:
            at, i = heapq.heappop(due)
            heapq.heappush(due, (at + interval, i))
            sock = socks[i]
            while waiting[i]:
                try:
                    sock.recv_multipart(zmq.NOBLOCK)
                    waiting[i] = False
                except zmq.Again:
                    break
            if waiting[i]:
                skipped += 1
                continue
            call_id += 1
            sock.send_multipart(messages.encode_call(
                call_id, KEY, "report", 5000, (_worker_id(i), [], stats, []), {},
                auth=_token(i)))
            waiting[i] = True
            sent += 1
        time.sleep(max(0.0, min(0.005, due[0][0] - time.monotonic())))
    print(json.dumps({"sent": sent, "skipped": skipped}), flush=True)
    for sock in socks:
        sock.close()
    ctx.term()


# ---------------------------------------------------------------- the node (this process)


def _threads() -> dict[int, tuple[str, float]]:
    """tid -> (its comm, its CPU seconds) for every thread of this process."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (comm, (int(fields[11]) + int(fields[12])) / _TICKS)
    return out


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run(n: int, interval: float, seconds: float, turn_s: float) -> dict:
    tune_gc()  # as the controller's process does
    node = Node().start()
    try:
        hosted = node.host(KEY, Desk, (turn_s,))
        for i in range(n):
            node.grant(_token(i), tokens.WORKER, _worker_id(i))
        kinds = {t.native_id: ("loop" if t.name.startswith("iris-node") else "actor")
                 for t in threading.enumerate() if t.name.startswith("iris-")}
        rss0 = _rss_kb()
        helper = subprocess.Popen(
            [sys.executable, "-m", "bench.report_loop", "--hosts-of", node.address,
             "--hosts", str(n), "--interval", str(interval),
             "--seconds", str(seconds + WARMUP_S + 2 * interval)],
            stdout=subprocess.PIPE, text=True)
        time.sleep(WARMUP_S + interval)
        desk = hosted.instance
        before, r0, b0, t0 = _threads(), desk.reports, desk.batches, time.monotonic()
        time.sleep(seconds)
        after, r1, b1, t1 = _threads(), desk.reports, desk.batches, time.monotonic()
        rss1 = _rss_kb()
        out, _ = helper.communicate(timeout=60 + seconds)
        sent = json.loads(out.strip().splitlines()[-1])
    finally:
        node.stop()
    reports = max(1, r1 - r0)
    split: dict[str, float] = {}
    for tid, (comm, cpu) in after.items():
        kind = "zmq" if comm.startswith("ZMQbg") else kinds.get(tid, "other")
        split[kind] = split.get(kind, 0.0) + (cpu - before.get(tid, (comm, 0.0))[1])
    return {
        "hosts": n, "reports_per_s": round((r1 - r0) / (t1 - t0), 1),
        "reports_per_batch": round((r1 - r0) / max(1, b1 - b0), 1),
        "us_per_report": round(sum(split.values()) / reports * 1e6, 1),
        **{f"{k}_us": round(v / reports * 1e6, 1) for k, v in sorted(split.items())},
        "rss_kb_per_host": round((rss1 - rss0) / n, 1), "skipped": sent["skipped"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="(bench.ab passes it; no effect)")
    ap.add_argument("--hosts", type=int, default=2000)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--turn-ms", type=float, default=30.0,
                    help="each batch's turn sleeps this long, as the controller's turn takes"
                         " time (30: batches near bench.fleet's at 10,000 hosts)")
    ap.add_argument("--hosts-of", help=argparse.SUPPRESS)  # the helper process's role
    args = ap.parse_args()
    if args.hosts_of:
        return hosts_main(args.hosts_of, args.hosts, args.interval, args.seconds)
    figures = run(args.hosts, args.interval, args.seconds, args.turn_ms / 1000)
    for k, v in figures.items():
        print(f"  {k:18} {v}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
