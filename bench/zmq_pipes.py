"""Benchmark: how a ZeroMQ ROUTER's resident memory grows with messages per connection.

    python -m bench.zmq_pipes [--quick] [--connections 2000] [--rounds 800]

Not Iris code: bare pyzmq, to tell a leak from libzmq's own per-connection memory. One ROUTER
in this process echoes; a child process holds --connections DEALERs (a TCP connection each)
and sends one 200-byte message on each per round, then reads every echo. libzmq queues a
pipe's messages in chunks of 256 slots of 64 bytes (16 KiB), allocated whole but touched
slot by slot, and keeps one spare chunk per queue: the first ~2 x 256 messages each way on a
connection bring new pages in, ~2 x 64 bytes a round trip; then it is flat. A controller's
RSS at a large fleet therefore climbs for the first ~500 reports per host (at 10,000 hosts
and a 3 s interval: ~25 minutes) and then stays flat (bench/fleet.py).

Figures: bytes of RSS per round trip per connection over the first 200 rounds, the round
after which RSS stopped growing, the plateau's growth per connection (KiB), and the growth
over the last third of the rounds (0 when flat). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import zmq

from bench._report import step


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _dealers(n: int, rounds: int, address: str) -> None:
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, n + 16)
    socks = []
    for _ in range(n):
        s = ctx.socket(zmq.DEALER)
        s.connect(address)
        socks.append(s)
    for _ in range(rounds):
        for s in socks:
            s.send(b"x" * 200)
        for s in socks:
            s.recv()
    ctx.destroy(linger=0)


def run(n: int, rounds: int) -> dict:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    address = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    child = subprocess.Popen([sys.executable, "-m", "bench.zmq_pipes", "--dealers", str(n),
                              str(rounds), address])
    rss = []
    for _ in range(rounds):
        for _ in range(n):
            rid, body = router.recv_multipart()
            router.send_multipart([rid, body])
        rss.append(_rss_mb())
    child.wait(60)
    ctx.destroy(linger=0)
    first = min(200, rounds - 1)
    per_round = (rss[first] - rss[2]) * 1024 * 1024 / ((first - 2) * n)
    plateau_at = next((r for r in range(rounds) if rss[r] >= rss[-1] - 0.05), rounds)
    third = rounds * 2 // 3
    return {"connections": n, "rounds": rounds,
            "bytes_per_round_trip_per_connection": per_round,
            "flat_after_round": plateau_at,
            "plateau_kib_per_connection": (rss[-1] - rss[2]) * 1024 / n,
            "growth_mb_last_third": rss[-1] - rss[third]}


def main() -> None:
    if sys.argv[1:2] == ["--dealers"]:
        return _dealers(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=800)
    args = ap.parse_args()
    n, rounds = (500, 700) if args.quick else (args.connections, args.rounds)
    step(f"{n:,} connections, {rounds} round trips each")
    r = run(n, rounds)
    print(f"RSS per round trip per connection (first 200 rounds): "
          f"{r['bytes_per_round_trip_per_connection']:.0f} B")
    print(f"flat after round {r['flat_after_round']}; plateau "
          f"{r['plateau_kib_per_connection']:.1f} KiB per connection; growth over the last "
          f"third {r['growth_mb_last_third']:.2f} MB")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
