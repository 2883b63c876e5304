"""Benchmark of weight sync (issue 16): Iris and Ray side by side on this machine, in one run.

    python -m bench.weights [--quick] [--only iris|ray] [--size-mib N] [--receivers R]
    python -m bench.weights --hosts N [--quick] [--chunk-mib C] [--cap-gbit G]   (root)

With --hosts, instead: N network-namespace hosts on a bridge, the weights chain and a big
call between them, sealed and plaintext, against raw plain and CURVE floors of the same
run (bench/_weights_hosts.py). Without it:

Not a test: it asserts nothing about speed. Weights are a dict of named float32 arrays
(16 tensors, like a small model's layers). Every receiver is its own process.

- echo: `echo(64 MiB array)` to an actor in another process; GB/s = 2 x 64 MiB / median round
  trip (GB = 1e9); for the raw floor and the socket path also the CPU ms of both processes
  per echo (the wall time on a shared machine is mostly waiting for a core). Iris twice: as configured (same host: shared memory) and with shared memory
  off (IRIS_SHM_MIN_BYTES=0 on both sides: the socket path, zero-copy frames). The floor is a
  bare pyzmq DEALER/ROUTER echo child (bench.actors --zmq-echo), no decoding, no copies.
- sync: one trainer (this process) -> R rollout processes, time until all R hold the weights
  (1 GiB, 256 MiB with --quick). Iris: iris.weights.Publisher.publish() to R Subscribers,
  of the trainer's own arrays and (flip_) of Publisher.buffers() filled in place
  (bench/_weights_sync.py: the modes, and what each times).
  Ray: ray.put(weights) then R actors ray.get it (passed as an argument), all waited for.
  The first sync (cold memory) and the median of the next few (steady state: each rollout
  keeps the newest version and drops the one before, as in an RL loop).
- peak RSS: VmHWM of each process over the sync step (reset before it through
  /proc/PID/clear_refs), in MiB. Shared pages (a shared-memory segment, Ray's object store)
  count in every process that maps them.

The last line printed is one JSON object of every figure; Ray's carry the prefix `ray_`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

from bench._procs import Children, exit_cleanly_on_signals, exit_with_parent
from bench._report import fmt, peer_installed, step

MiB = 1 << 20
ECHO_BYTES = 64 * MiB
TENSORS = 16
_CALL_TIMEOUT_S = 300.0


def make_weights(total_bytes: int, seed: int = 0) -> dict:
    import numpy as np

    per = total_bytes // TENSORS // 4
    return {f"layer{i}.w": np.full(per, seed + i, dtype=np.float32) for i in range(TENSORS)}


def peak_rss_mib(pid: int | None = None) -> float:
    with open(f"/proc/{pid or 'self'}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def reset_peak(pid: int | None = None) -> None:
    with open(f"/proc/{pid or 'self'}/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) a process has used so far."""
    with open(f"/proc/{pid or 'self'}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ms_per_call(call, reps: int, pid: int) -> float:
    """CPU ms of this process and process `pid` together per call: what a call costs, which
    other engineers' load on this shared machine moves far less than the wall time."""
    before = cpu_s() + cpu_s(pid)
    for _ in range(reps):
        call()
    return (cpu_s() + cpu_s(pid) - before) / reps * 1e3


def timed_median(call, reps: int) -> float:
    call()  # warm-up: connections, first-touch of pages
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def first_and_steady(sync, reps: int) -> tuple[float, float]:
    """Seconds of the first sync (cold memory) and the median of the next `reps` (an RL
    loop publishes every step: steady state is what it lives with)."""
    times = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        sync()
        times.append(time.perf_counter() - t0)
    return times[0], statistics.median(times[1:])


# ---------------------------------------------------------------- children


def serve_main(name: str) -> None:
    """Child: join $IRIS_ADDRESS; serve an echo actor as `name`, or (name "rollout") be a
    weights Subscriber of "policy"; live until stdin closes."""
    import numpy  # noqa: F401  (a rollout has it loaded: Ray's actors get a warm-up call)

    import iris

    exit_with_parent()

    @iris.actor
    class Echo:
        def echo(self, x):
            return x

        def peak_rss(self) -> float:
            return peak_rss_mib()

        def reset_peak(self) -> None:
            reset_peak()

    sub = None
    with iris.connect():
        if name == "rollout":
            sub = iris.weights.Subscriber(os.environ.get("POLICY", "policy"))
            Echo.serve(f"rollout-{os.getpid()}")
        else:
            Echo.serve(name)
        print("READY", os.getpid(), flush=True)
        sys.stdin.read()
        del sub


# ---------------------------------------------------------------- raw pyzmq floor


def bench_zmq(reps: int, children: Children) -> dict:
    import numpy as np
    import zmq

    child = children.spawn(["-m", "bench.actors", "--zmq-echo"])
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(child.expect("READY"))
    payload = np.ones(ECHO_BYTES, dtype=np.uint8)
    try:
        def call():
            dealer.send(payload, copy=False)
            return dealer.recv(copy=False)

        step("raw pyzmq 64 MiB echo")
        rtt = timed_median(call, reps)
        return {"zmq_echo_gbps": 2 * ECHO_BYTES / rtt / 1e9,
                "zmq_echo_cpu_ms": cpu_ms_per_call(call, reps, child.proc.pid)}
    finally:
        dealer.close(linger=0)
        ctx.term()
        child.kill()


# ---------------------------------------------------------------- Iris


def bench_iris(cfg: dict, children: Children) -> dict:
    import numpy as np

    import iris
    from iris.actors import Node, NodeConfig

    out: dict = {}
    payload = np.ones(ECHO_BYTES, dtype=np.uint8)
    with iris.local_cluster() as cluster:
        env = {"IRIS_ADDRESS": cluster.address}
        echo_child = children.spawn(["-m", "bench.weights", "--serve", "echo"], env)
        echo_child.expect("READY")
        ref = iris.resolve("echo", timeout=60)
        step("iris 64 MiB echo (same host: shared memory)")
        rtt = timed_median(lambda: ref.echo(payload).result(_CALL_TIMEOUT_S), cfg["reps"])
        out["echo_gbps"] = 2 * ECHO_BYTES / rtt / 1e9
        echo_child.kill()

        plain = children.spawn(["-m", "bench.weights", "--serve", "echo-socket"],
                               {**env, "IRIS_SHM_MIN_BYTES": "0"})
        plain_pid = int(plain.expect("READY"))
        target = iris.resolve("echo-socket", timeout=60)
        node = Node(NodeConfig(shm_min_bytes=0)).start()
        try:  # a second node of this process, with shared memory off
            def socket_echo():
                return node.call(target.address, target._key, "echo", (payload,),
                                 timeout_s=_CALL_TIMEOUT_S).result(_CALL_TIMEOUT_S)

            step("iris 64 MiB echo (socket, shared memory off)")
            rtt = timed_median(socket_echo, cfg["reps"])
            out["echo_socket_gbps"] = 2 * ECHO_BYTES / rtt / 1e9
            out["echo_socket_cpu_ms"] = cpu_ms_per_call(socket_echo, cfg["reps"], plain_pid)
        finally:
            node.stop()
            plain.kill()
        from bench._weights_sync import iris_sync

        for prefix, mode in (("cold_", "cold"), ("", "hint"), ("flip_", "flip"),
                             ("chain_", "socket")):
            with _shm_off(mode == "socket"), iris.connect(cluster.address):
                figures = iris_sync(cfg, children, env, f"policy-{prefix or 'warm'}", mode)
            out.update({prefix + k: v for k, v in figures.items()})
    return out


@contextlib.contextmanager
def _shm_off(off: bool):
    """IRIS_SHM_MIN_BYTES=0 for nodes made inside (the socket path, as to other hosts)."""
    old = os.environ.get("IRIS_SHM_MIN_BYTES")
    if off:
        os.environ["IRIS_SHM_MIN_BYTES"] = "0"
    try:
        yield
    finally:
        if off:
            os.environ.pop("IRIS_SHM_MIN_BYTES")
            if old is not None:
                os.environ["IRIS_SHM_MIN_BYTES"] = old


# ---------------------------------------------------------------- Ray


def bench_ray(cfg: dict) -> dict:
    import logging

    import numpy as np
    import ray

    from bench._weights_sync import rss_mib

    ray.init(num_cpus=cfg["receivers"] + 1, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    try:
        @ray.remote
        class Echo:
            def echo(self, x):
                return x

            def hold(self, weights):
                self.weights = weights  # keep it, as a rollout would
                return sum(w.nbytes for w in weights.values())

            def peak_rss(self) -> float:
                return peak_rss_mib()

            def reset_peak(self) -> None:
                reset_peak()

        out: dict = {}
        echo = Echo.remote()
        payload = np.ones(ECHO_BYTES, dtype=np.uint8)
        step("ray 64 MiB echo")
        rtt = timed_median(lambda: ray.get(echo.echo.remote(payload)), cfg["reps"])
        out["ray_echo_gbps"] = 2 * ECHO_BYTES / rtt / 1e9
        ray.kill(echo)

        before = rss_mib()
        actors = [Echo.remote() for _ in range(cfg["receivers"])]
        ray.get([a.hold.remote(make_weights(4 * MiB)) for a in actors])  # started
        weights = make_weights(cfg["size"], seed=1)
        ray.get([a.reset_peak.remote() for a in actors])
        reset_peak()
        step(f"ray sync {cfg['size'] // MiB} MiB -> {len(actors)} actors")

        def sync():
            ref = ray.put(weights)
            ray.get([a.hold.remote(ref) for a in actors])

        first, seconds = first_and_steady(sync, cfg["sync_reps"])
        out["ray_sync_first_s"] = first
        rss = ray.get([a.peak_rss.remote() for a in actors])
        out.update(ray_sync_s=seconds, ray_sync_gbps_per_receiver=cfg["size"] / seconds / 1e9,
                   ray_rss_trainer_mib=peak_rss_mib(), ray_rss_receiver_max_mib=max(rss),
                   ray_rss_trainer_step_mib=peak_rss_mib() - before,
                   ray_rss_receivers_mib=rss)
        return out
    finally:
        ray.shutdown()


# ---------------------------------------------------------------- report


def print_table(f: dict, cfg: dict) -> None:
    def ratio(mine, theirs, higher=True):
        if not mine or not theirs:
            return ""
        return f"{(mine / theirs if higher else theirs / mine):.2f}x"

    size = f"{cfg['size'] // MiB} MiB"
    print(f"\nweight sync, {os.cpu_count()} cores, {cfg['receivers']} receivers; "
          "ratio > 1 means Iris is better")
    print(f"{'metric':44} {'unit':>6} {'iris':>10} {'ray':>10} {'ratio':>7}")
    rows = [("echo_gbps", "64 MiB array echo (same host)", "GB/s", True),
            ("echo_socket_gbps", "64 MiB array echo (socket, shm off)", "GB/s", True),
            ("cold_sync_first_s", f"{size} -> all hold it, first, no size hint", "s", False),
            ("sync_first_s", f"{size} -> all hold it, first, size hint", "s", False),
            ("sync_s", f"{size} -> all hold it, steady", "s", False),
            ("sync_gbps_per_receiver", f"  {size} / that time", "GB/s", True),
            ("flip_sync_first_s", f"{size} buffers() flip, first", "s", False),
            ("flip_sync_s", f"{size} buffers() flip, steady", "s", False),
            ("flip_copy_sync_s", "  + copying the weights in (memcpy)", "s", False),
            ("chain_sync_first_s", f"{size} socket chain, first", "s", False),
            ("chain_sync_s", f"{size} socket chain, steady", "s", False),
            ("chain_sync_gbps_per_receiver", f"  {size} / that time", "GB/s", True),
            ("chain_sync_gbps_all_links", "  bytes all links moved / that time", "GB/s", True),
            ("rss_trainer_mib", "peak RSS, trainer (sync step)", "MiB", False),
            ("rss_trainer_step_mib", "  of it, made by the sync step", "MiB", False),
            ("flip_rss_trainer_step_mib", "  the same, buffers() flip", "MiB", False),
            ("rss_receiver_max_mib", "peak RSS, largest receiver", "MiB", False),
            ("chain_rss_receiver_max_mib", "  socket chain", "MiB", False)]
    for key, label, unit, higher in rows:
        bare = key.removeprefix("cold_").removeprefix("chain_").removeprefix("flip_")
        mine, theirs = f.get(key), f.get(f"ray_{bare.replace('copy_', '')}")
        if key == "echo_socket_gbps":
            theirs = f.get("ray_echo_gbps")
        print(f"{label:44} {unit:>6} {fmt(mine):>10} {fmt(theirs):>10} "
              f"{ratio(mine, theirs, higher):>7}")
    if f.get("zmq_echo_cpu_ms") and f.get("echo_socket_cpu_ms"):
        print(f"CPU per 64 MiB echo, both processes: raw pyzmq {fmt(f['zmq_echo_cpu_ms'])} ms, "
              f"iris socket {fmt(f['echo_socket_cpu_ms'])} ms (iris / floor "
              f"{ratio(f['zmq_echo_cpu_ms'], f['echo_socket_cpu_ms'])} by CPU)")
    floor = f.get("zmq_echo_gbps")
    print(f"floor, raw pyzmq 64 MiB echo: {fmt(floor)} GB/s; iris / floor: same host "
          f"{ratio(f.get('echo_gbps'), floor)}, socket {ratio(f.get('echo_socket_gbps'), floor)}")
    for prefix, name in (("", "iris"), ("ray_", "ray")):
        if f.get(f"{prefix}rss_receivers_mib"):
            print(f"peak RSS per receiver, {name} (MiB): "
                  + ", ".join(fmt(v) for v in f[f"{prefix}rss_receivers_mib"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--only", choices=("iris", "ray"), help="measure one system only")
    parser.add_argument("--size-mib", type=int, help="weights sent in the sync step, MiB "
                        "(default 1024; 256 with --quick)")
    parser.add_argument("--receivers", type=int, default=4, help="rollout processes (4)")
    parser.add_argument("--hosts", type=int, metavar="N", help="instead: N network-namespace "
                        "hosts on a bridge (root): the chain 1 -> N-1 sealed and plaintext, a "
                        "big call between two hosts, and raw plain/CURVE floors (see "
                        "bench/_weights_hosts.py)")
    parser.add_argument("--chunk-mib", type=int, help="with --hosts: chunk size, MiB "
                        "(default: the Publisher's, 4)")
    parser.add_argument("--cap-gbit", type=float, help="with --hosts: cap each host's "
                        "outgoing rate (tc tbf), Gbit/s")
    parser.add_argument("--serve", metavar="NAME", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve_main(args.serve)
    if args.hosts is not None:
        return hosts_main(args)
    size_mib = args.size_mib or (256 if args.quick else 1024)
    if size_mib < TENSORS or args.receivers < 1:
        parser.error(f"--size-mib must be >= {TENSORS} and --receivers >= 1")
    cfg = {"size": size_mib * MiB, "receivers": args.receivers, "reps": 3 if args.quick else 8,
           "sync_reps": 3 if args.quick else 5}
    exit_cleanly_on_signals()
    started = time.perf_counter()
    figures: dict = {}
    with Children() as children:
        figures.update(bench_zmq(cfg["reps"], children))
        if args.only != "ray":
            figures.update(bench_iris(cfg, children))
    if args.only != "iris" and peer_installed():
        figures.update(bench_ray(cfg))
    print_table(figures, cfg)
    figures.update(quick=args.quick, echo_bytes=ECHO_BYTES, sync_bytes=cfg["size"],
                   receivers=cfg["receivers"], wall_s=time.perf_counter() - started)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else
                      [round(x, 1) for x in v] if isinstance(v, list) else v
                      for k, v in figures.items()}))


def hosts_main(args: argparse.Namespace) -> None:
    from bench import _weights_hosts

    if args.hosts < 2:
        raise SystemExit("--hosts must be >= 2 (a trainer and at least one rollout)")
    size = (args.size_mib or 256) * MiB
    from iris.actors import relay

    chunk = args.chunk_mib * MiB if args.chunk_mib else relay.CHUNK_BYTES
    cfg = {"hosts": args.hosts, "size": size, "chunk": chunk,
           "call_size": (256 if args.quick else 1024) * MiB, "reps": 3 if args.quick else 5,
           "sync_reps": 3 if args.quick else 7, "cap_gbit": args.cap_gbit}
    exit_cleanly_on_signals()
    started = time.perf_counter()
    figures = _weights_hosts.run(cfg)
    _weights_hosts.print_table(figures, cfg)
    figures.update(quick=args.quick, sync_bytes=size, wall_s=time.perf_counter() - started)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else
                      [round(x, 3) for x in v] if isinstance(v, list) else v
                      for k, v in figures.items()}))


if __name__ == "__main__":
    main()
