"""Benchmark of actor calls (issue 2): Iris and Ray side by side on this machine, in one run.

    python -m bench.actors [--quick] [--only iris|ray] [--n N]

Not a test: it asserts nothing about speed. Every figure has the actor in a different process
from its caller (Ray's actors live in worker processes too). Iris runs first, with its
registry in this process and each actor in a `python -m bench.actors --serve NAME` child;
then Ray, started with `ray.init(num_cpus=N)`. Both sides run the same loops:

- sync: one call at a time, `echo(16 bytes)`, waiting for each reply; median and p99.
- async: rounds of 1,000 calls submitted at once, then all waited for; calls/s. Once to a
  plain (`def`) method, which Ray and Iris both run one at a time on the actor's thread,
  and once to an `async def` method (Iris: the node's event loop; Ray: an async actor).
- n:n: N client processes x N actor processes; each client sends rounds of 1,000 calls
  spread round robin over all N actors (Ray's own "n:n actor calls async" shape). Clients
  report their start and end on the machine's monotonic clock; calls/s = all calls /
  (last end - first start).
- big: `echo(64 MiB bytes)`; GB/s = 2 x 64 MiB (there and back) / median round trip, GB = 1e9.
- new actor: from starting a new actor (Iris: Popen of a fresh Python process that joins the
  cluster and serves one actor; Ray: `Echo.remote()`, which Ray usually places in one of
  the N worker processes it keeps started in advance) until the reply of its first call.
- CPU per call: user + system CPU of the caller's process and the actor's process over the
  measured calls, divided by the calls. This machine is shared, so calls/s moves with the
  neighbours' load; CPU per call barely does.
- in-process (`--parts local`, Iris only): the sync and async loops to an actor hosted in
  the caller's own process, whose calls go through its mailbox instead of a socket.
- floor: a bare pyzmq DEALER/ROUTER echo in a child process, measured with the same loops,
  so a reader can tell a slow machine from a slow runtime. The goal's ratio (sync median /
  the echo's) takes both from one more run of the two interleaved in blocks of 50 calls
  (`sync_paired_median_us`, `zmq_sync_paired_median_us`), so both see the same load.

N defaults to 2, the core count of the machine the issue's figures come from. The table's
ratio column is oriented so that > 1 means Iris is better. The last line printed is one
JSON object of every figure; Ray's carry the prefix `ray_`, the floor's `zmq_`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench._call_loops import (
    BIG_BYTES,
    SMALL,
    WINDOW,
    combine_clients,
    measure_big,
    measure_latency,
    measure_paired,
    measure_rate,
    pipelined_rounds,
)
from bench._procs import Children, exit_cleanly_on_signals, exit_with_parent
from bench._report import fmt, peer_installed, step

# How long each figure's steady state is measured (s); quick keeps the whole run < 1 min.
_FULL = dict(seconds=5.0, big_reps=10, new_reps=8)
_QUICK = dict(seconds=1.2, big_reps=3, new_reps=3)
_CALL_TIMEOUT_S = 120.0


PARTS = ("sync", "async", "big", "nn", "new", "local")


@dataclass(frozen=True)
class Settings:
    n: int              # client processes = actor processes for n:n
    seconds: float      # steady-state measuring time per figure, s
    big_reps: int       # 64 MiB round trips measured (after one warm-up)
    new_reps: int       # new actors started and called once
    parts: frozenset[str] = frozenset(PARTS)  # which figures to measure (--parts)


def one_to_one(system: str, cfg: Settings, pids: list[int], async_pids: list[int], *,
               call: Callable[[object], object], echo_round: Callable[[], object],
               aecho_round: Callable[[], object],
               raw: Callable[[object], object] | None = None) -> dict:
    """The 1:1 figures of one system; `pids` are the actor processes whose CPU counts too;
    `raw`: the raw pyzmq echo, to time the sync call against, interleaved."""
    out: dict = {}
    if "sync" in cfg.parts:
        step(f"{system} sync")
        lat = measure_latency(lambda: call(SMALL), cfg.seconds, pids)
        out.update(sync_median_us=lat["median_us"], sync_p99_us=lat["p99_us"],
                   sync_calls_s=lat["calls_s"], sync_cpu_us=lat["cpu_us"])
        if raw is not None:
            step(f"{system} sync and raw pyzmq, interleaved")
            mine, floor = measure_paired(lambda: call(SMALL), lambda: raw(SMALL), cfg.seconds)
            out.update(sync_paired_median_us=mine, zmq_sync_paired_median_us=floor)
    if "async" in cfg.parts:
        step(f"{system} async")
        rate = measure_rate(echo_round, WINDOW, cfg.seconds, pids)
        async_rate = measure_rate(aecho_round, WINDOW, cfg.seconds, async_pids)
        out.update(async_calls_s=rate["calls_s"], async_cpu_us=rate["cpu_us"],
                   async_method_calls_s=async_rate["calls_s"],
                   async_method_cpu_us=async_rate["cpu_us"])
    if "big" in cfg.parts:
        step(f"{system} 64 MiB")
        big = measure_big(call, cfg.big_reps)
        out.update(big_gbps=big["gbps"], big_rtt_ms=big["rtt_ms"])
    return out


# ---------------------------------------------------------------- Iris


def _iris_echo_class():
    import iris

    @iris.actor
    class Echo:
        def echo(self, x):
            return x

        async def aecho(self, x):
            return x

    return Echo


def serve_main(name: str) -> None:
    """Child: join $IRIS_ADDRESS, serve Echo as `name`, live until stdin closes."""
    import iris

    with iris.connect():
        _iris_echo_class().serve(name)
        print("READY", flush=True)
        sys.stdin.read()


def client_main(names: list[str]) -> None:
    """Child: resolve `names`; per `go SECONDS` line, run pipelined rounds, print DONE json."""
    import iris

    with iris.connect():
        refs = [iris.resolve(name, timeout=60) for name in names]
        methods = [ref.echo for ref in refs]
        n = len(methods)
        print("READY", flush=True)

        def wait(futs: list) -> None:
            for fut in futs:
                fut.result(_CALL_TIMEOUT_S)

        for line in sys.stdin:
            seconds = float(line.split()[1])
            report = pipelined_rounds(lambda i: methods[i % n](SMALL), wait, seconds)
            print("DONE", json.dumps(report), flush=True)


def bench_iris(cfg: Settings, children: Children,
               raw: Callable[[object], object] | None = None) -> dict:
    import iris

    with iris.local_cluster() as cluster:
        env = {"IRIS_ADDRESS": cluster.address}

        def serve(name: str):
            return children.spawn(["-m", "bench.actors", "--serve", name], env)

        actor = serve("echo")
        actor.expect("READY")
        ref = iris.resolve("echo", timeout=60)
        echo, aecho = ref.echo, ref.aecho
        out = one_to_one(
            "iris", cfg, [actor.proc.pid], [actor.proc.pid],
            call=lambda x: echo(x).result(_CALL_TIMEOUT_S),
            echo_round=lambda: [f.result(_CALL_TIMEOUT_S)
                                for f in [echo(SMALL) for _ in range(WINDOW)]],
            aecho_round=lambda: [f.result(_CALL_TIMEOUT_S)
                                 for f in [aecho(SMALL) for _ in range(WINDOW)]], raw=raw)
        actor.kill()
        if "local" in cfg.parts:
            out.update(_iris_local(cfg))
        if "nn" in cfg.parts:
            step("iris n:n")
            out["nn_calls_s"] = _iris_nn(cfg, children, serve, env)
        if "new" in cfg.parts:
            step("iris new actor")
            out["new_actor_ms"] = _iris_new_actor(cfg, serve)
    return out


def _iris_local(cfg: Settings) -> dict:
    """The sync and async loops to an actor hosted in this very process (calls go through
    its mailbox, not a socket); figures prefixed `local_`."""
    import iris

    _iris_echo_class().serve("local-echo")
    echo = iris.resolve("local-echo", timeout=60).echo
    step("iris in-process sync")
    lat = measure_latency(lambda: echo(SMALL).result(_CALL_TIMEOUT_S), cfg.seconds, [])
    step("iris in-process async")
    rate = measure_rate(lambda: [f.result(_CALL_TIMEOUT_S)
                                 for f in [echo(SMALL) for _ in range(WINDOW)]],
                        WINDOW, cfg.seconds, [])
    return {"local_sync_median_us": lat["median_us"], "local_sync_cpu_us": lat["cpu_us"],
            "local_async_calls_s": rate["calls_s"], "local_async_cpu_us": rate["cpu_us"]}


def _iris_nn(cfg: Settings, children: Children, serve, env: dict) -> float:
    names = [f"nn-{i}" for i in range(cfg.n)]
    actors = [serve(name) for name in names]
    for actor in actors:
        actor.expect("READY")
    clients = [children.spawn(["-m", "bench.actors", "--client", ",".join(names)], env)
               for _ in range(cfg.n)]
    for client in clients:
        client.expect("READY")
    reports: list[dict] = []
    for seconds in (0.3, cfg.seconds):  # warm-up, then the measured run
        for client in clients:
            client.send(f"go {seconds}")
        reports = [json.loads(c.expect("DONE", _CALL_TIMEOUT_S)) for c in clients]
    for child in clients + actors:
        child.kill()
    return combine_clients(reports)


def _iris_new_actor(cfg: Settings, serve) -> float:
    import iris

    times = []
    for i in range(cfg.new_reps):
        t0 = time.perf_counter()
        child = serve(f"fresh-{i}")
        if iris.resolve(f"fresh-{i}", timeout=60).echo(SMALL).result(_CALL_TIMEOUT_S) != SMALL:
            raise RuntimeError("the new actor answered wrongly")
        times.append(time.perf_counter() - t0)
        child.kill()
    return statistics.median(times) * 1e3


# ---------------------------------------------------------------- raw pyzmq floor


def zmq_echo_main() -> None:
    """Child: a bare ROUTER that sends every message straight back (no decoding, no copies)."""
    import zmq

    exit_with_parent()
    router = zmq.Context().socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    print("READY", f"tcp://127.0.0.1:{port}", flush=True)
    while True:
        router.send_multipart(router.recv_multipart(copy=False), copy=False)


@contextlib.contextmanager
def raw_echo(children: Children):
    """A blocking call to a raw pyzmq echo in a child process (the floor), open while inside."""
    import zmq

    child = children.spawn(["-m", "bench.actors", "--zmq-echo"])
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(child.expect("READY"))

    def call(x):
        dealer.send(x, copy=False)
        return dealer.recv(copy=False).buffer

    call.pid = child.proc.pid  # type: ignore[attr-defined]  # whose CPU counts too
    try:
        yield call
    finally:
        dealer.close(linger=0)
        ctx.term()
        child.kill()


def bench_zmq(cfg: Settings, call: Callable[[object], object]) -> dict:
    """The transport's floor on this machine right now: raw pyzmq, same loops as above."""
    step("raw pyzmq")
    out = {}
    if "sync" in cfg.parts:
        out["zmq_sync_median_us"] = measure_latency(lambda: call(SMALL), min(cfg.seconds, 2.0),
                                                    [])["median_us"]
    if "big" in cfg.parts:
        out["zmq_big_gbps"] = measure_big(call, cfg.big_reps)["gbps"]
    return out


# ---------------------------------------------------------------- Ray


def bench_ray(cfg: Settings) -> dict:
    import ray

    ray.init(num_cpus=cfg.n, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    try:
        return {f"ray_{k}": v for k, v in _ray_figures(ray, cfg).items()}
    finally:
        ray.shutdown()


def _ray_classes(ray):
    @ray.remote(num_cpus=0)
    class Echo:
        def echo(self, x):
            return x

        def pid(self):
            return os.getpid()

    @ray.remote(num_cpus=0)
    class AsyncEcho:
        async def aecho(self, x):
            return x

        async def pid(self):
            return os.getpid()

    @ray.remote(num_cpus=0)
    class Client:
        def __init__(self, actors):
            self.methods = [a.echo for a in actors]

        def run(self, seconds):
            methods, n = self.methods, len(self.methods)
            return pipelined_rounds(lambda i: methods[i % n].remote(SMALL), ray.get, seconds)

    return Echo, AsyncEcho, Client


def _ray_figures(ray, cfg: Settings) -> dict:
    Echo, AsyncEcho, Client = _ray_classes(ray)
    a, b = Echo.remote(), AsyncEcho.remote()
    echo, aecho = a.echo, b.aecho
    out = one_to_one(
        "ray", cfg, [ray.get(a.pid.remote())], [ray.get(b.pid.remote())],
        call=lambda x: ray.get(echo.remote(x)),
        echo_round=lambda: ray.get([echo.remote(SMALL) for _ in range(WINDOW)]),
        aecho_round=lambda: ray.get([aecho.remote(SMALL) for _ in range(WINDOW)]))
    ray.kill(a)
    ray.kill(b)
    if "nn" in cfg.parts:
        step("ray n:n")
        actors = [Echo.remote() for _ in range(cfg.n)]
        clients = [Client.remote(actors) for _ in range(cfg.n)]
        ray.get([c.run.remote(0.3) for c in clients])
        out["nn_calls_s"] = combine_clients(ray.get([c.run.remote(cfg.seconds)
                                                     for c in clients]))
        for actor in [*actors, *clients]:
            ray.kill(actor)
    if "new" not in cfg.parts:
        return out
    step("ray new actor")
    times = []
    for _ in range(cfg.new_reps):
        t0 = time.perf_counter()
        fresh = Echo.remote()
        if ray.get(fresh.echo.remote(SMALL)) != SMALL:
            raise RuntimeError("the new Ray actor answered wrongly")
        times.append(time.perf_counter() - t0)
        ray.kill(fresh)
    out["new_actor_ms"] = statistics.median(times) * 1e3
    return out


# ---------------------------------------------------------------- report

# (key, label, unit, higher is better)
_ROWS = [
    ("sync_median_us", "1:1 sync call, median", "us", False),
    ("sync_p99_us", "1:1 sync call, p99", "us", False),
    ("sync_calls_s", "1:1 sync calls/s", "calls/s", True),
    ("sync_cpu_us", "  CPU per sync call (both sides)", "us", False),
    ("async_calls_s", "1:1 async, 1,000 in flight", "calls/s", True),
    ("async_cpu_us", "  CPU per async call (both sides)", "us", False),
    ("async_method_calls_s", "1:1 async, async def method", "calls/s", True),
    ("async_method_cpu_us", "  CPU per call (both sides)", "us", False),
    ("nn_calls_s", "n:n async (N clients x N actors)", "calls/s", True),
    ("local_sync_median_us", "in-process sync call, median", "us", False),
    ("local_async_calls_s", "in-process async, 1,000 in flight", "calls/s", True),
    ("big_gbps", "64 MiB echo (2x64 MiB / rtt)", "GB/s", True),
    ("big_rtt_ms", "64 MiB echo round trip", "ms", False),
    ("new_actor_ms", "new actor until first reply", "ms", False),
]


def print_table(figures: dict, cfg: Settings) -> None:
    print(f"\nactor calls, N={cfg.n}, {os.cpu_count()} cores; ratio > 1 means Iris is better")
    print(f"{'metric':36} {'unit':>8} {'iris':>12} {'ray':>12} {'ratio':>7}")
    for key, label, unit, higher in _ROWS:
        mine, theirs = figures.get(key), figures.get(f"ray_{key}")
        ratio = ""
        if mine and theirs:
            ratio = f"{(mine / theirs if higher else theirs / mine):.2f}x"
        print(f"{label:36} {unit:>8} {fmt(mine):>12} {fmt(theirs):>12} {ratio:>7}")
    print(f"floor, raw pyzmq DEALER/ROUTER echo (no decoding, no copies): sync median "
          f"{fmt(figures.get('zmq_sync_median_us'))} us, 64 MiB "
          f"{fmt(figures.get('zmq_big_gbps'))} GB/s")
    for key, label in (("sync_vs_zmq", "Iris sync median / raw pyzmq's, interleaved (goal <= 2)"),
                       ("big_vs_zmq", "Iris 64 MiB GB/s / raw pyzmq's (goal >= 0.8)"),
                       ("async_vs_ray", "Iris async calls/s / Ray's (goal >= 9)")):
        if key in figures:
            print(f"{label}: {figures[key]:.2f}")


def goal_ratios(figures: dict) -> dict:
    """The issue-32 goals as ratios to this run's floor and peer (when both were measured)."""
    pairs = {"sync_vs_zmq": ("sync_paired_median_us", "zmq_sync_paired_median_us")
             if figures.get("sync_paired_median_us") else ("sync_median_us", "zmq_sync_median_us"),
             "big_vs_zmq": ("big_gbps", "zmq_big_gbps"),
             "async_vs_ray": ("async_calls_s", "ray_async_calls_s")}
    return {name: figures[a] / figures[b] for name, (a, b) in pairs.items()
            if figures.get(a) and figures.get(b)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--only", choices=("iris", "ray"), help="measure one system only")
    parser.add_argument("--n", type=int, default=2, help="n:n clients and actors (default 2)")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"figures to measure, a comma list of {', '.join(PARTS)} (all)")
    parser.add_argument("--seconds", type=float,
                        help="steady-state time per figure, s (default 5; 1.2 with --quick)")
    parser.add_argument("--serve", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--client", metavar="NAMES", help=argparse.SUPPRESS)
    parser.add_argument("--zmq-echo", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve_main(args.serve)
    if args.client:
        return client_main(args.client.split(","))
    if args.zmq_echo:
        return zmq_echo_main()
    if args.n < 1:
        parser.error(f"--n must be at least 1, got {args.n}")
    parts = frozenset(p.strip() for p in args.parts.split(",") if p.strip())
    if not parts or not parts <= set(PARTS):
        parser.error(f"--parts {args.parts!r}: expected a comma list of {', '.join(PARTS)}")
    if args.seconds is not None and args.seconds <= 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")
    base = dict(_QUICK if args.quick else _FULL)
    if args.seconds is not None:
        base["seconds"] = args.seconds
    cfg = Settings(n=args.n, parts=parts, **base)
    exit_cleanly_on_signals()
    started = time.perf_counter()
    figures: dict = {}
    with Children() as children, raw_echo(children) as raw:
        figures.update(bench_zmq(cfg, raw))
        if args.only != "ray":
            figures.update(bench_iris(cfg, children, raw))
    if args.only != "iris" and peer_installed():
        figures.update(bench_ray(cfg))
    figures.update(goal_ratios(figures))
    print_table(figures, cfg)
    figures.update(n=cfg.n, quick=args.quick, small_arg_bytes=len(SMALL), big_bytes=BIG_BYTES,
                   window=WINDOW, wall_s=time.perf_counter() - started)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in figures.items()}))


if __name__ == "__main__":
    main()
