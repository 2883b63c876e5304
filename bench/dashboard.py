"""Benchmark of the dashboard (issue 8): jobs-page API latency with 10,000 jobs in the store.

    python -m bench.dashboard [--quick] [--jobs N] [--requests R]

Not a test: it asserts nothing about speed. Setup: a fresh state directory is filled with N
jobs (10,000; 2,000 with --quick) through the real JobStore and kernel Submit events (20
users, three priority bands, 1-4 replicas), then 70% of them are killed through kernel Kill
events, so the store holds pending and killed jobs with their tasks. A real controller (and
registry) is hosted on a node over that directory, as `iris controller serve` would, and the
dashboard is started on it; no workers, so every pending job has a pending reason in the
controller's snapshot. Each request is a real HTTP GET over loopback from this process
(client time included), R times per case (200; 50 with --quick), one at a time:

- jobs_first_page: /api/jobs (default: newest first, 50 per page)
- jobs_deep_page: page 150 of 50, sorted by name ascending (OFFSET deep in the table)
- jobs_filter_state_user: state=pending & user=user-7 (JSON field filter, full scan)
- jobs_filter_prefix: prefix=/user-3/job-01 (a primary-key range)
- jobs_per_page_500: the largest page allowed
- job_detail: /api/job?id=... of one job with its tasks and attempts
- scheduler: /api/scheduler (every job with pending tasks, by band, with its reason)
- metrics: /metrics (scans the tasks table)

Each figure: median and p99 in milliseconds. The issue's budget: the jobs list answers in
<= 100 ms with 10,000 jobs. Then, whether the dashboard slows the controller (same process,
one GIL): controller_status_idle / controller_status_under_load are the round trip of the
controller actor's `status` call (served on the controller's own thread, like a submit),
R times, first with nothing else running, then while a thread hammers the heaviest pages
(/api/jobs?per_page=500, the user filter, /metrics) back to back.

With the default --killed-share 0.7 the controller holds 3,000 pending jobs (7,500 tasks)
and no workers: its own 50 ms tick (a placement pass over every pending task) then keeps its
thread busy, and that CPU, not the dashboard's, sets most of the p99 figures; --killed-share
1.0 shows the dashboard against an idle controller. The last line printed is one JSON
object of every figure.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

from iris.actors import ClusterContext, Node, NodeConfig
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK
from iris.base.ids import new_id
from iris.controller.jobs import events as ev
from iris.controller.jobs import kernel
from iris.controller.jobs.spec import PRIORITIES, validate_submit
from iris.controller.jobs.store import JobStore
from iris.controller.main import host_controller
from iris.controller.service import ControllerConfig
from iris.dashboard import start_dashboard

_USERS = 20
_BATCH = 500  # Persist effects per store transaction while filling


def fill_store(state_dir: Path, jobs: int, killed_share: float = 0.7) -> None:
    """`jobs` jobs through the real kernel and store; `killed_share` of them killed."""
    store = JobStore(state_dir)
    state = store.load()
    persists: list = []
    now = SYSTEM_CLOCK.wall()
    names = []
    for i in range(jobs):
        spec = validate_submit({
            "name": f"job-{i:05d}", "user": f"user-{i % _USERS}",
            "entrypoint": {"kind": "command", "argv": ["true"]},
            "replicas": 1 + i % 4, "priority": PRIORITIES[i % 3]})
        _, effects = kernel.handle(state, ev.Submit(new_id("ev-"), spec), now + i * 1e-3)
        persists += [e for e in effects if isinstance(e, ev.Persist)]
        names.append(spec.name)
        if len(persists) >= _BATCH:
            store.apply(persists)
            persists = []
    for name in names[: int(jobs * killed_share)]:
        _, effects = kernel.handle(state, ev.Kill(new_id("ev-"), name, "bench"), now + jobs)
        persists += [e for e in effects if isinstance(e, ev.Persist)]
        if len(persists) >= _BATCH:
            store.apply(persists)
            persists = []
    store.apply(persists)
    store.close()


def _measure(conn: http.client.HTTPConnection, path: str, requests: int) -> dict:
    times = []
    for _ in range(requests):
        start = SYSTEM_CLOCK.monotonic()
        conn.request("GET", path)
        reply = conn.getresponse()
        body = reply.read()
        times.append((SYSTEM_CLOCK.monotonic() - start) * 1000)
        if reply.status != 200:
            raise SystemExit(f"GET {path} -> {reply.status}: {body[:300]!r}")
    times.sort()
    return {"median_ms": round(statistics.median(times), 2),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 2)}


def run(jobs: int, requests: int, killed_share: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="iris-bench-dash-") as tmp:
        state_dir = Path(tmp) / "controller"
        start = SYSTEM_CLOCK.monotonic()
        fill_store(state_dir, jobs, killed_share)
        fill_s = SYSTEM_CLOCK.monotonic() - start
        node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
        try:
            host_controller(node, ControllerConfig(state_dir=state_dir))
            ctx = ClusterContext(node, node.address)
            handle = start_dashboard(node, node.address, state_dir, port=0)
            try:
                result = _cases(handle.url, requests)
                result.update(_interference(node, handle.url, requests))
            finally:
                handle.stop()
                ctx.close()
        finally:
            node.stop()
    return {"jobs": jobs, "requests": requests, "killed_share": killed_share,
            "fill_s": round(fill_s, 2), **result}


def _status_calls(node: Node, requests: int) -> dict:
    times = []
    for _ in range(requests):
        start = SYSTEM_CLOCK.monotonic()
        node.call(node.address, CONTROLLER_KEY, "status", ("/user-3/job-00003",)).result(60)
        times.append((SYSTEM_CLOCK.monotonic() - start) * 1000)
    times.sort()
    return {"median_ms": round(statistics.median(times), 2),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 2)}


def _interference(node: Node, url: str, requests: int) -> dict:
    idle = _status_calls(node, requests)
    stop = threading.Event()
    pages = ["/api/jobs?per_page=500", "/api/jobs?state=pending&user=user-7", "/metrics"]

    def hammer() -> None:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        while not stop.is_set():
            for page in pages:
                conn.request("GET", page)
                conn.getresponse().read()
        conn.close()

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    try:
        loaded = _status_calls(node, requests)
    finally:
        stop.set()
        thread.join()
    print(f"controller status call: idle median {idle['median_ms']} p99 {idle['p99_ms']} ms; "
          f"under dashboard load median {loaded['median_ms']} p99 {loaded['p99_ms']} ms",
          flush=True)
    return {**{f"controller_status_idle_{k}": v for k, v in idle.items()},
            **{f"controller_status_under_load_{k}": v for k, v in loaded.items()}}


def _cases(url: str, requests: int) -> dict:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    cases = {
        "jobs_first_page": "/api/jobs",
        "jobs_deep_page": "/api/jobs?sort=name&order=asc&page=150&per_page=50",
        "jobs_filter_state_user": "/api/jobs?state=pending&user=user-7",
        "jobs_filter_prefix": "/api/jobs?prefix=/user-3/job-01",
        "jobs_per_page_500": "/api/jobs?per_page=500",
        "job_detail": "/api/job?id=/user-3/job-00003",
        "scheduler": "/api/scheduler",
        "metrics": "/metrics",
    }
    _measure(conn, "/api/jobs", 5)  # warm: the reader thread opens its connection
    out = {}
    for name, path in cases.items():
        figures = _measure(conn, path, requests)
        out.update({f"{name}_{k}": v for k, v in figures.items()})
        print(f"{name:26s} median {figures['median_ms']:7.2f} ms   p99 "
              f"{figures['p99_ms']:7.2f} ms   {path}", flush=True)
    conn.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--jobs", type=int, help="jobs in the store (default 10,000)")
    parser.add_argument("--requests", type=int, help="requests per case (default 200)")
    parser.add_argument("--killed-share", type=float, default=0.7,
                        help="share of the jobs killed (finished); the rest stay pending")
    args = parser.parse_args(argv)
    jobs = args.jobs or (2_000 if args.quick else 10_000)
    requests = args.requests or (50 if args.quick else 200)
    print(json.dumps(run(jobs, requests, args.killed_share)))


if __name__ == "__main__":
    main()
