"""Benchmark of looking inside running jobs (issue 31): what sampling attempts' use costs a
worker, how long `iris task stack` takes on a task with 50 threads, and what the dashboard's
proxy adds to a request to a task's named port.

    python -m bench.inside [--quick]

The last line printed is one JSON object of the figures.

What each figure means:
- sample_ms_per_100: CPU milliseconds one reading of 100 running attempts takes (each a
  process in its own memory cgroup, as a worker runs them); sampling_core_pct: that at the
  default interval (2 s), as a percentage of one core (the target is <= 1 %).
- worker_core_pct_on / _off (full run only): the CPU of a real worker process running 100
  attempts, over the same window, sampling at its default interval and with sampling off;
  the difference is what sampling costs the worker whole (reports included).
- stack_api_s: `inspect.task_stack` on a task of 50 threads, median of 5 (client ->
  controller's inspector -> worker's inspector -> py-spy dump and back); stack_cli_s: the
  whole `iris task stack JOB` command, a new interpreter included, median of 3 (target
  <= 2 s end to end).
- proxy_p50_ms / direct_p50_ms: one GET at a time to a task's aiohttp server, through
  /proxy/JOB/0/http/ and straight to its port, alternating blocks; proxy_added_p50_ms is
  the difference (target <= 2 ms). proxy_rps / direct_rps: requests a second with 16 at once.
No peer: Ray's dashboard has no proxy to a task's own ports, and its py-spy stack view is
the same tool as here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
from pathlib import Path

import aiohttp

import iris
from iris.client import inspect as inspector
from iris.dashboard import start_dashboard
from iris.worker.cgroups import detect
from iris.worker.process import AttemptProcess, AttemptSpec
from iris.worker.usage_sampler import SamplerConfig, UsageSampler

_THREADS = textwrap.dedent("""
    import pathlib, sys, threading, time
    def level_three():
        time.sleep(600)
    def level_two():
        level_three()
    def level_one():
        level_two()
    for _ in range(49):
        threading.Thread(target=level_one, daemon=True).start()
    pathlib.Path(sys.argv[1]).write_text("ready")
    level_one()
""")
_APP = textwrap.dedent("""
    import asyncio, os, pathlib, sys
    from aiohttp import web
    async def hello(request):
        return web.Response(text="hello")
    async def main():
        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", int(os.environ["IRIS_PORT_HTTP"])).start()
        pathlib.Path(sys.argv[1]).write_text("ready")
        await asyncio.Event().wait()
    asyncio.run(main())
""")


def _wait_file(path: Path, timeout_s: float = 300.0) -> None:
    end = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > end:
            raise RuntimeError(f"{path} never appeared")
        time.sleep(0.05)


# ------------------------------------------------------------ sampling cost


def sampling_cost(attempts: int, rounds: int) -> dict:
    """CPU of readings of `attempts` real attempts, each in its own memory cgroup."""
    host = detect()
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for n in range(attempts):
                work = Path(tmp) / f"w{n}"
                work.mkdir()
                spec = AttemptSpec(f"/bench/j[{n}]", 0, Path(tmp) / f"a{n}", work,
                                   {"PATH": "/usr/bin:/bin"})
                procs.append(AttemptProcess.start(spec, ["sleep", "600"], cgroups=host))
            sampler = UsageSampler(lambda: procs, SamplerConfig(interval_s=0))
            sampler.sample_once()  # warm: first readings walk the work dirs
            began = time.process_time()
            for _ in range(rounds):
                sampler.sample_once()
            per = (time.process_time() - began) / rounds
        finally:
            for proc in procs:
                proc.stop(0)
    interval = SamplerConfig().interval_s
    return {"attempts": attempts, "cgroups": host is not None,
            "sample_ms_per_100": round(per * 1000 * 100 / attempts, 2),
            "sampling_core_pct": round(100 * per * 100 / attempts / interval, 3)}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_cpu(attempts: int, window_s: float, interval: str) -> float:
    """CPU % of one core of a real worker running `attempts` sleepers, over `window_s`."""
    os.environ["IRIS_USAGE_INTERVAL_S"] = interval
    try:
        with iris.local_cluster(workers=1, worker_cpu=attempts, stop_grace_s=1.0):
            job = iris.submit(["sleep", "600"], name="sleepers", replicas=attempts,
                              resources=iris.Resources(cpu=1))
            end = time.monotonic() + 600
            while job.status()["task_counts"].get("running", 0) < attempts:
                if time.monotonic() > end:
                    raise RuntimeError("the sleepers never all ran")
                time.sleep(0.5)
            pid = int(iris.current().node.call(
                iris.current().address, "/iris/controller", "list_workers").result(30)[0]
                ["attributes"]["pid"])
            time.sleep(3.0)  # the starts' own work settles
            before = _cpu_s(pid)
            time.sleep(window_s)
            used = _cpu_s(pid) - before
            job.kill()
            return round(100 * used / window_s, 2)
    finally:
        os.environ.pop("IRIS_USAGE_INTERVAL_S", None)


# ------------------------------------------------------------ stacks and the proxy


def _started(code: str, tmp: Path, name: str, **submit) -> iris.JobHandle:
    ready = tmp / f"{name}.ready"
    job = iris.submit([sys.executable, "-c", code, str(ready)], name=name, **submit)
    _wait_file(ready)
    return job


def stack_times(cluster, tmp: Path, api_runs: int, cli_runs: int) -> dict:
    job = _started(_THREADS, tmp, "threads50")
    try:
        api = []
        for _ in range(api_runs):
            began = time.perf_counter()
            got = inspector.task_stack(job.job_id)
            api.append(time.perf_counter() - began)
        threads = got["processes"][0]["text"].count("Thread ")
        cli = []
        for _ in range(cli_runs):
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "iris", "task", "stack", job.job_id,
                                   "--address", cluster.address], capture_output=True,
                                  text=True, check=True)
            cli.append(time.perf_counter() - began)
        assert done.stdout.count("level_three") >= 50, done.stdout[-500:]
    finally:
        job.kill()
    return {"stack_threads": threads, "stack_api_s": round(statistics.median(api), 3),
            "stack_cli_s": round(statistics.median(cli), 3)}


async def _latencies(url: str, n: int, session: aiohttp.ClientSession) -> list[float]:
    out = []
    for _ in range(n):
        began = time.perf_counter()
        async with session.get(url) as reply:
            await reply.read()
        out.append(time.perf_counter() - began)
    return out


async def _rate(url: str, seconds: float, session: aiohttp.ClientSession,
                concurrency: int = 16) -> float:
    end, count = time.perf_counter() + seconds, [0]

    async def one() -> None:
        while time.perf_counter() < end:
            async with session.get(url) as reply:
                await reply.read()
            count[0] += 1
    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return count[0] / (time.perf_counter() - began)


async def _proxy_figures(direct: str, proxied: str, n: int, seconds: float) -> dict:
    lat = {"direct": [], "proxy": []}
    rps = {"direct": [], "proxy": []}
    async with aiohttp.ClientSession() as session:
        await _latencies(proxied, 20, session)  # warm both paths' connections
        await _latencies(direct, 20, session)
        for block in range(10):  # alternate, so a load change hits both alike
            order = [("direct", direct), ("proxy", proxied)]
            for name, url in order if block % 2 == 0 else order[::-1]:
                lat[name] += await _latencies(url, n // 10, session)
        for name, url in [("direct", direct), ("proxy", proxied)] * 2:
            rps[name].append(await _rate(url, seconds / 2, session))
    p50 = {k: statistics.median(v) * 1000 for k, v in lat.items()}
    return {"direct_p50_ms": round(p50["direct"], 3), "proxy_p50_ms": round(p50["proxy"], 3),
            "proxy_added_p50_ms": round(p50["proxy"] - p50["direct"], 3),
            "direct_p99_ms": round(_p99(lat["direct"]) * 1000, 3),
            "proxy_p99_ms": round(_p99(lat["proxy"]) * 1000, 3),
            "direct_rps": round(statistics.mean(rps["direct"])),
            "proxy_rps": round(statistics.mean(rps["proxy"]))}


def _p99(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.99) - 1]


def proxy_figures(cluster, tmp: Path, n: int, seconds: float) -> dict:
    job = _started(_APP, tmp, "web", resources=iris.Resources(ports=["http"]))
    handle = start_dashboard(cluster.node, cluster.address, port=0)
    try:
        direct = inspector.task_url(job.job_id, "http")["url"]
        proxied = f"{handle.url}proxy/{urllib.parse.quote(job.job_id, safe='')}/0/http/"
        return asyncio.run(_proxy_figures(direct, proxied, n, seconds))
    finally:
        handle.stop()
        job.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="< 1 min: fewer rounds, no "
                        "whole-worker A/B")
    args = parser.parse_args()
    figures: dict = {"quick": args.quick}
    figures.update(sampling_cost(100, 5 if args.quick else 30))
    print(f"sampling: {figures['sample_ms_per_100']} ms of CPU per reading of 100 attempts "
          f"= {figures['sampling_core_pct']} % of a core at 2 s", flush=True)
    with tempfile.TemporaryDirectory() as tmp, \
            iris.local_cluster(workers=1, worker_cpu=8, stop_grace_s=1.0) as cluster:
        figures.update(stack_times(cluster, Path(tmp), 5, 2 if args.quick else 5))
        print(f"stack of {figures['stack_threads']} threads: api {figures['stack_api_s']} s, "
              f"cli {figures['stack_cli_s']} s", flush=True)
        figures.update(proxy_figures(cluster, Path(tmp), 300 if args.quick else 2000,
                                     2.0 if args.quick else 10.0))
        print(f"proxy p50 {figures['proxy_p50_ms']} ms vs direct {figures['direct_p50_ms']} "
              f"ms (+{figures['proxy_added_p50_ms']}); {figures['proxy_rps']} vs "
              f"{figures['direct_rps']} req/s", flush=True)
    if not args.quick:
        for interval in ("2", "0", "2", "0"):  # A/B/A/B
            key = "worker_core_pct_on" if interval != "0" else "worker_core_pct_off"
            figures.setdefault(key, []).append(worker_cpu(100, 30.0, interval))
        print(f"worker CPU with 100 attempts: sampling on {figures['worker_core_pct_on']} %,"
              f" off {figures['worker_core_pct_off']} %", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
