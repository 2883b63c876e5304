"""What a peer with no token costs a node: memory and log bytes, raw ZeroMQ frames it builds.

    python -m bench.hostile [--quick]

Each figure is taken against a node of its own (a subprocess hosting a control-plane actor
under /iris/, logging warnings to a file), from one DEALER with no token:
- frames_peak_mb: the node's peak RSS after ONE message of 1,000,000 empty frames (2 MB sent);
- header_peak_mb: its peak after one CALL to the control-plane actor whose 50 MB header is
  an array of small ints (each 1 byte sent, 8 bytes and more held once decoded);
- flood_rss_mb, flood_log_bytes: its RSS, and the bytes of its log, after N undecodable
  frames, N casts it refuses (no token) and N pickled calls (the control plane reads none);
- start_rss_mb: the RSS of a fresh node, for scale.
The last line is the figures as JSON (bench/ab.py reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

import msgpack
import zmq

SERVER = """
import logging, sys, time
logging.basicConfig(level=logging.WARNING, stream=open(sys.argv[1], "w"))
from iris.actors import Node, NodeConfig, actor
from iris.actors.hosting import requires
@actor
class Thing:
    @requires("controller")
    def guarded(self): pass
    def echo(self, x): return x
node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
node.host("/iris/thing", Thing)
print(node.address, flush=True)
while True:
    time.sleep(0.2)
    print(node.stats.malformed, node.stats.calls_received, flush=True)
"""


class Server:
    def __init__(self, log: str):
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, log], stdout=subprocess.PIPE,
                                     text=True)
        self.address = self.proc.stdout.readline().strip()

    def status(self, field: str) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith(field))

    def until(self, malformed: int = 0, received: int = 0) -> None:
        """Until the node counted this many malformed messages and received calls."""
        while True:
            m, c = map(int, self.proc.stdout.readline().split())
            if m >= malformed and c >= received:
                return

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


def _dealer(ctx: zmq.Context, address: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.sndhwm = sock.rcvhwm = 0
    sock.linger = 0
    sock.connect(address)
    return sock


def _one(ctx: zmq.Context, tmp: str, send) -> tuple[Server, zmq.Socket]:
    server = Server(os.path.join(tmp, f"node-{time.monotonic_ns()}.log"))
    sock = _dealer(ctx, server.address)
    send(sock)
    return server, sock


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a flood of 50,000, not 200,000")
    n = 50_000 if parser.parse_args().quick else 200_000
    ctx, out = zmq.Context(), {}
    with tempfile.TemporaryDirectory() as tmp:
        head = msgpack.packb([1, 1, 1, "/iris/thing", "echo", 60_000, 0, [["x"], {}]])
        server, sock = _one(ctx, tmp, lambda s: s.send_multipart([head, *[b""] * 1_000_000]))
        out["start_rss_mb"] = server.status("VmRSS")  # (read after the send: close enough)
        server.until(malformed=1)
        out["frames_peak_mb"] = server.status("VmHWM")
        server.stop()
        count = 50_000_000  # [1, CALL, 2, actor, method, timeout, fmt, [[zeros], {}]]
        header = (b"\x98" + msgpack.packb(1) + msgpack.packb(1) + msgpack.packb(2)
                  + msgpack.packb("/iris/thing") + msgpack.packb("echo")
                  + msgpack.packb(60_000) + msgpack.packb(0) + b"\x92\x91\xdd"
                  + count.to_bytes(4, "big") + b"\x00" * count + b"\x80")
        server, sock = _one(ctx, tmp, lambda s: s.send(header))
        assert sock.poll(300_000), "no answer to the big header"
        sock.recv()
        out["header_peak_mb"] = server.status("VmHWM")
        server.stop()
        cast = msgpack.packb([1, 2, 0, "/iris/thing", "guarded", 60_000, 0, [[], {}]])
        pickled = msgpack.packb([1, 1, 3, "/iris/thing", "echo", 60_000, 1,
                                 pickle.dumps((("x",), {}))])

        def flood(s: zmq.Socket) -> None:
            for i in range(n):
                s.send(os.urandom(1 + i % 40))
                s.send(cast)
                s.send(pickled)
                if i % 1000 == 0:
                    while s.poll(0):
                        s.recv()
        server, sock = _one(ctx, tmp, flood)
        server.until(malformed=n - n // 100, received=2 * n)
        while sock.poll(500):
            sock.recv()
        out["flood_rss_mb"] = server.status("VmRSS")
        out["flood_log_bytes"] = os.path.getsize(server.log)
        server.stop()
    ctx.destroy(linger=0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
