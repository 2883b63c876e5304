"""Benchmark: one real controller holding a fleet of N simulated hosts (issue 21).

    python -m bench.fleet [--quick] [--hosts 1000,5000,10000] [--procs 4] [--window 60]
                          [--rate JOBS_PER_S] [--profile DIR] [--fronts 0,2]

Not a test: it asserts nothing. For each N, a fresh `iris controller serve` process and N
simulated hosts in --procs helper processes (bench/_fleet_hosts.py: a DEALER, so a TCP
connection, per host; the real IRIS/1 frames; one call in flight per host with a worker's
5 s timeout; a report every interval the controller asks for, 1-3 s, and at once when an
attempt ends; a worker holds no registry name, so it renews nothing). The helpers share
the machine's cores with the controller. Once every host is registered, 5 s pass (each
host has been told its interval), then IDLE_S of heartbeats alone, then for --window
seconds a client submits small command jobs one after another and waits for each (with
--rate, R a second on time, each waited for by a thread of its own). Figures:

- register_s: helper processes started -> the controller lists all N hosts.
- controller_cpu_idle: its CPU over IDLE_S of heartbeats alone (100 = one core): holding
  the fleet.
- reports_per_s, cpu_us_per_report: reports the controller handled a second in that window
  (its own counter; a controller from before batching has none: N a second is assumed, its
  fixed interval), and its CPU divided by them (all of it: ticks and snapshots included).
  The figure the machine's load moves least. threads_us_per_report: the same split by
  thread (/proc's per-thread CPU, threads named by py-spy): "loop" (the node's: receive,
  decode, check, send), "controller" (the actor's turns: reports, ticks, the snapshot's
  build), "zmq" (libzmq's I/O threads: TCP reads and writes, which no Python profile sees),
  "other".
- reports_per_batch, interval_s: how many reports one turn handled; the interval told.
- controller_cpu: the controller process's CPU over the window (jobs submitted one after
  another, each a scheduling pass over every host), 100 = one core.
- rss_mb_start / rss_mb_end: its resident memory at the window's start and end;
  rss_mb_per_min_last5: its slope (least squares over samples every 10 s) over the last 5
  minutes of the window, or the whole window if shorter. Most of a big fleet's growth is
  libzmq touching, for the first time, the message queues it allocated per connection
  (16 KiB chunks of 256 message slots, two per direction: ~55 KiB a connection, reached
  after ~480 messages each way; see bench/zmq_pipes.py), so a long window shows the plateau.
- submit_done_ms_p50 / p90 / max: `iris.submit` called -> `job.wait()` saw it succeed;
  jobs_not_done: jobs that had not succeeded 60 s after their submit (any is a defect).
- false_losses: reports the controller answered with "reregister" (it had dropped a live
  host) plus hosts missing from its list at the end.
- pass_ms_p50: the controller's scheduling-pass duration (its own histogram).
- late_max, late_1_5s_max, overdue_max, silent_max_s: from the controller's snapshot every
  2 s over the heartbeat-only window and the job window, the most workers at once that were
  late by the controller's rule (silent > 2 x the interval it asked of each + 1 s:
  fencing.late_after_s, what /metrics, the dashboard and `iris worker list` say), by the
  old rule (silent > 1.5 s, whatever the interval), overdue (silent > their interval + 1 s:
  a report more than a second behind), and the longest silence seen.

--fronts K[,K...]: the controller runs K report fronts (`--report-fronts K`,
controller/report_fronts.py), each size once per K, in this order (an A/B in one run). The
controller's figures above are its own process's; fronts_cpu_idle / fronts_cpu /
fronts_rss_mb are its fronts' together (from /proc, its children); rss_kb_per_host is the
controller's RSS at the end over N; reports_via_front the share of the hosts' reports sent
to a front; front_failures the reports a front failed (the host then sent it to the
controller). A simulated host, as a worker does, closes its controller connection after
10 s unused while it reports through a front.

--quick runs N = 500 and 2,000 (unless --hosts says) with a 15 s window (unless --window
says), so that bench.ab, which passes --quick, can run any size. The last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import iris
from bench._report import fmt, step
from iris.base.errors import IrisError
from iris.client.jobs import _controller
from iris.wire.fencing import worker_is_late

ROOT = Path(__file__).resolve().parents[1]
IDLE_S = 10.0  # the heartbeat-only window
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of the process, by thread id (/proc's per-thread stat)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICKS
    return out


def _thread_kinds(pid: int) -> dict[int, str]:
    """Thread id -> what it is: "zmq" (libzmq's I/O threads, named by libzmq), "loop" (the
    node's), "controller" (the controller actor's turn), else "other". Python threads are
    named through py-spy (this venv's), which reads them from the live process."""
    kinds = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("ZMQbg"):
                kinds[int(task.name)] = "zmq"
        except OSError:
            continue
    spy = Path(sys.executable).with_name("py-spy")
    try:
        dump = subprocess.run([str(spy), "dump", "-p", str(pid)], capture_output=True,
                              text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        dump = ""
    for line in dump.splitlines():  # Thread 3501 (idle): "iris-node-79c9f669161f"
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0] == "Thread" and parts[1].isdigit():
            name = parts[2].split(":", 1)[-1].strip().strip('"')
            kinds[int(parts[1])] = ("loop" if name.startswith("iris-node") else "controller"
                                    if name == "iris-actor-/iris/controller" else "other")
    return kinds


def _per_thread(kinds: dict, before: dict, after: dict, per: float) -> dict[str, float]:
    """CPU microseconds per `per` (reports) of each kind of thread between two readings."""
    out: dict[str, float] = {}
    for tid, cpu in after.items():
        kind = kinds.get(tid, "other")
        out[kind] = out.get(kind, 0.0) + (cpu - before.get(tid, 0.0)) / per * 1e6
    return {k: round(v, 1) for k, v in sorted(out.items())}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class _RssSampler(threading.Thread):
    """The controller's RSS every 10 s from `start()` until `stop()`: (seconds, MB) pairs."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples, self._done = pid, [], threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while True:
            self.samples.append((time.monotonic() - t0, _rss_mb(self.pid)))
            if self._done.wait(10.0):
                return

    def stop(self) -> list:
        self._done.set()
        self.join()
        return self.samples

    @staticmethod
    def slope_mb_per_min(samples: list, last_s: float = 300.0) -> float | None:
        tail = [(t, m) for t, m in samples if t >= samples[-1][0] - last_s] if samples else []
        if len(tail) < 3:
            return None
        mt = statistics.fmean(t for t, _ in tail)
        mm = statistics.fmean(m for _, m in tail)
        den = sum((t - mt) ** 2 for t, _ in tail)
        return sum((t - mt) * (m - mm) for t, m in tail) / den * 60 if den else None


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _py_spy(pid: int, seconds: float, out: Path | None) -> subprocess.Popen | None:
    """py-spy recording the controller for `seconds` (raw folded stacks to `out`, by thread,
    only stacks holding the GIL: on a loaded machine a thread waiting for it is not
    working), or None."""
    if out is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "-r", "50", "-f", "raw", "--gil", "--threads",
                             "-d",
                             str(int(seconds)), "-p", str(pid), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(n: int, procs: int, window: float, controller_root: Path = ROOT,
        rate: float = 0.0, profile: Path | None = None, fronts: int = 0) -> dict:
    from bench import _fleet_fronts

    state = Path(tempfile.mkdtemp(prefix="iris-fleet-"))
    address = f"tcp://127.0.0.1:{_port()}"
    ctl = subprocess.Popen([sys.executable, "-m", "iris", "controller", "serve", "--state-dir",
                            str(state), "--bind", address,
                            *(["--report-fronts", str(fronts)] if fronts else [])],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, cwd=controller_root,
                           env={**os.environ, "PYTHONPATH": str(controller_root)})
    hosts: list[subprocess.Popen] = []
    try:
        assert ctl.stdout.readline().startswith("controller serving")
        token_file = state / "cluster.token"
        token = token_file.read_text().strip() if token_file.exists() else ""
        started = time.monotonic()
        life = 120 + window + n / 50  # the helpers stop by themselves
        per = -(-n // procs)
        for i in range(procs):
            count = min(per, n - i * per)
            hosts.append(subprocess.Popen(
                [sys.executable, "-m", "bench._fleet_hosts", address, str(i * per), str(count),
                 str(life)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                env={**os.environ, "IRIS_CLUSTER_TOKEN": token}))
        with iris.connect(address) as ctx:
            while (listed := _listed(ctx)) < n:
                if time.monotonic() - started > life - window - 30:  # then the helpers end
                    raise RuntimeError(f"registration unfinished: {max(listed, 0)} of {n} "
                                       f"hosts listed after {time.monotonic() - started:.0f} s")
                time.sleep(3.0)  # each answer lists every host: ~0.1 s of the controller
            register_s = time.monotonic() - started
            time.sleep(5.0)  # every host has had an answer telling it its interval
            late = _LateSampler(ctx)
            late.start()
            reports0 = _reports(ctx)
            spies = [_py_spy(ctl.pid, IDLE_S, profile and profile / f"idle-{n}.txt")]
            kinds = _thread_kinds(ctl.pid)
            fpids = _fleet_fronts.front_pids(ctl.pid)
            fidle0 = _fleet_fronts.cpu_s(fpids)
            idle0, threads0, i0 = _cpu_s(ctl.pid), _thread_cpu_s(ctl.pid), time.monotonic()
            time.sleep(IDLE_S)  # heartbeats only: what holding the fleet costs
            idle_s = time.monotonic() - i0
            idle_cpu_s = _cpu_s(ctl.pid) - idle0
            fronts_idle_s = _fleet_fronts.cpu_s(fpids) - fidle0
            threads1 = _thread_cpu_s(ctl.pid)
            reports1 = _reports(ctx)
            reports = reports1["reports"] - reports0["reports"] or n * idle_s  # see above
            batches = reports1["batches"] - reports0["batches"]
            cpu0, rss0, t0 = _cpu_s(ctl.pid), _rss_mb(ctl.pid), time.monotonic()
            fcpu0 = _fleet_fronts.cpu_s(fpids)
            sampler = _RssSampler(ctl.pid)
            sampler.start()
            spies.append(_py_spy(ctl.pid, window, profile and profile / f"jobs-{n}.txt"))
            latencies, not_done = _jobs(window, rate)
            cpu = (_cpu_s(ctl.pid) - cpu0) / (time.monotonic() - t0) * 100
            fronts_cpu = (_fleet_fronts.cpu_s(fpids) - fcpu0) / (time.monotonic() - t0) * 100
            rss1 = _rss_mb(ctl.pid)
            fronts_rss = _fleet_fronts.rss_mb(fpids)
            fronts_now = _fleet_fronts.front_pids(ctl.pid)
            rss_series = sampler.stop()
            lateness = late.stop()
            listed = len(_controller(ctx, "list_workers", timeout_s=120))
            passes = _controller(ctx, "snapshot").get("scheduling_passes", {})
            for spy in filter(None, spies):
                spy.wait(60)
        for h in hosts:
            h.terminate()
        counts = [json.loads(h.stdout.read().strip().splitlines()[-1] or "{}") for h in hosts]
        reregister = sum(c.get("reregister", 0) for c in counts)
        return {"hosts": n, "fronts": fronts, "register_s": register_s,
                "controller_cpu_idle": idle_cpu_s / idle_s * 100,
                "reports_per_s": reports / idle_s,
                "cpu_us_per_report": idle_cpu_s / reports * 1e6 if reports else None,
                "threads_us_per_report": _per_thread(kinds, threads0, threads1, reports)
                if reports else None,
                "reports_per_batch": reports / batches if batches else None,
                "interval_s": reports1.get("interval_s"),
                "controller_cpu": cpu,
                "rss_mb_start": rss0, "rss_mb_end": rss1, "rss_kb_per_host": rss1 * 1024 / n,
                "fronts_cpu_idle": fronts_idle_s / idle_s * 100, "fronts_cpu": fronts_cpu,
                "fronts_rss_mb": fronts_rss, "fronts_replaced": fpids != fronts_now,
                "reports_via_front": sum(c.get("via_front", 0) for c in counts)
                / max(1, sum(c.get("reports", 0) for c in counts)),
                "front_failures": sum(c.get("front_failures", 0) for c in counts),
                "front_failed_by": {k: sum(c.get(k, 0) for c in counts) for k in
                                    sorted({k for c in counts for k in c
                                            if k.startswith("front_") and k != "front_failures"})},
                "rss_mb_per_min_last5": _RssSampler.slope_mb_per_min(rss_series),
                "rss_mb_series": [round(m) for _, m in rss_series],
                "submit_done_ms_p50": statistics.median(latencies) if latencies else None,
                "submit_done_ms_p90": (statistics.quantiles(latencies, n=10)[-1]
                                       if len(latencies) >= 10 else None),
                "submit_done_ms_max": max(latencies) if latencies else None,
                "jobs": len(latencies), "jobs_per_s": len(latencies) / window,
                "jobs_not_done": len(not_done),
                "not_done": not_done[:5], "false_losses": reregister + max(0, n - listed),
                "errors": sum(c.get("errors", 0) for c in counts),
                "pass_ms_p50": _median_ms(passes), **lateness}
    finally:
        for p in [*hosts, ctl]:
            if p.poll() is None:
                p.kill()
            p.wait(30)


def _listed(ctx) -> int:
    """Hosts the controller lists; -1 when it did not answer (on a loaded machine a
    controller registering thousands of hosts can go silent past a client's 3 s liveness
    rule: that is the registration storm, not the figure, so the bench asks again)."""
    try:
        return len(_controller(ctx, "list_workers", timeout_s=120))
    except IrisError as exc:
        print(f"  list_workers while registering: {type(exc).__name__}", flush=True)
        return -1


def _jobs(window: float, rate: float) -> tuple[list, list]:
    """Small command jobs for `window` seconds: one after another (rate 0), or `rate` a
    second whatever their latency (each submitted on time and waited for by a thread).
    Submit -> done latencies (ms) of those that succeeded, and descriptions of the rest."""
    latencies, not_done, lock = [], [], threading.Lock()

    def one(k: int, due: float) -> None:
        try:
            job = iris.submit(["true"], name=f"j{k}")
            state = job.wait(timeout=60)["state"]
        except IrisError as exc:  # a controller past its limit: counted, not fatal
            with lock:
                not_done.append(f"j{k}: {type(exc).__name__}")
            return
        with lock:
            if state == "succeeded":
                latencies.append((time.monotonic() - due) * 1000)
            else:  # what the controller knows of it, for the record
                not_done.append(f"{job.job_id}: {state} "
                                f"{json.dumps(job.status(), default=str)[:600]}")

    t0, k = time.monotonic(), 0
    if not rate:
        while time.monotonic() - t0 < window:
            k += 1
            one(k, time.monotonic())
        return latencies, not_done
    with ThreadPoolExecutor(max_workers=int(rate * 3) + 8) as pool:
        while (due := t0 + k / rate) < t0 + window:
            time.sleep(max(0.0, due - time.monotonic()))
            k += 1
            pool.submit(contextvars.copy_context().run, one, k, due)  # iris.connect's
    return latencies, not_done


class _LateSampler(threading.Thread):
    """Every 2 s, from the controller's snapshot: how many workers are late by its rule, by
    the old 1.5 s rule, and overdue; the longest silence (see the module docstring)."""

    def __init__(self, ctx):
        super().__init__(daemon=True)
        self.ctx, self._done = ctx, threading.Event()
        self.figures = {"late_max": 0, "late_1_5s_max": 0, "overdue_max": 0,
                        "silent_max_s": 0.0, "late_samples": 0}

    def run(self) -> None:
        while not self._done.wait(2.0):
            try:
                rows = _controller(self.ctx, "snapshot", timeout_s=30).get("workers", [])
            except IrisError:
                continue
            f, silences = self.figures, [r.get("last_heard_s_ago", 0.0) for r in rows]
            f["late_samples"] += 1
            f["late_max"] = max(f["late_max"], sum(map(worker_is_late, rows)))
            f["late_1_5s_max"] = max(f["late_1_5s_max"], sum(s > 1.5 for s in silences))
            f["overdue_max"] = max(f["overdue_max"], sum(
                r.get("last_heard_s_ago", 0.0) > r.get("report_interval_s", 3.0) + 1.0
                for r in rows))
            f["silent_max_s"] = max([f["silent_max_s"], *silences])

    def stop(self) -> dict:
        self._done.set()
        self.join()
        return dict(self.figures)


def _reports(ctx) -> dict:
    """The controller's report counters (its snapshot, rebuilt every 0.5-2 s: read it twice
    the same way, so the difference is over about the same span)."""
    return _controller(ctx, "snapshot", timeout_s=120).get("reports") or \
        {"reports": 0, "batches": 0}


def _median_ms(hist: dict) -> float | None:
    """Median of the controller's pass histogram ({"buckets": {le: cumulative}, "count"})."""
    total = hist.get("count") or 0
    for le, running in sorted((float(k), v) for k, v in (hist.get("buckets") or {}).items()):
        if total and running >= total / 2:
            return le * 1000
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--hosts", help="fleet sizes (default 1000,5000,10000; --quick 500,2000)")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--window", type=float, help="seconds of jobs (default 60; --quick 15)")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="jobs a second, submitted on time whatever their latency (default: "
                         "one after another)")
    ap.add_argument("--controller-root", type=Path, default=ROOT,
                    help="run the controller from this checkout (figures 'before' a change)")
    ap.add_argument("--fronts", default="0",
                    help="report fronts (iris controller serve --report-fronts), a list for "
                         "an A/B in one run, e.g. 0,2 (default 0)")
    ap.add_argument("--profile", type=Path,
                    help="py-spy (in this venv) records the controller over the heartbeat-only "
                         "and the job windows: DIR/idle-N.txt, DIR/jobs-N.txt (folded stacks)")
    args = ap.parse_args()
    hosts = args.hosts or ("500,2000" if args.quick else "1000,5000,10000")
    sizes = [int(x) for x in hosts.split(",")]
    window = args.window or (15.0 if args.quick else 60.0)
    rows = []
    fronts = [int(x) for x in args.fronts.split(",")]
    cols = ["hosts", "fronts", "register_s", "controller_cpu_idle", "reports_per_s",
            "cpu_us_per_report",
            "threads_us_per_report",
            "reports_per_batch", "interval_s", "controller_cpu", "rss_mb_start", "rss_mb_end",
            "rss_mb_per_min_last5", "submit_done_ms_p50", "submit_done_ms_p90",
            "submit_done_ms_max", "jobs", "jobs_per_s", "jobs_not_done", "false_losses",
            "pass_ms_p50",
            "late_max", "late_1_5s_max", "overdue_max", "silent_max_s", "rss_kb_per_host",
            "fronts_cpu_idle", "fronts_cpu", "fronts_rss_mb", "reports_via_front",
            "front_failures"]
    for n, k in [(n, k) for n in sizes for k in fronts]:
        step(f"{n:,} simulated hosts, {k} report fronts")
        try:
            rows.append(run(n, args.procs, window, args.controller_root, args.rate,
                            args.profile, k))
        except Exception as exc:  # the controller stopped answering: that is the figure
            rows.append({"hosts": n, "fronts": k,
                         "failed": f"{type(exc).__name__}: {exc}"[:300]})
        print(" | ".join(cols), flush=True)
        for r in rows:
            print(" | ".join(fmt(r[c]) if isinstance(r.get(c), float) else str(r.get(c, "-"))
                             for c in cols) if "failed" not in r else
                  f"{r['hosts']} | failed: {r['failed']}", flush=True)
    tag = (lambda r: f"n{r['hosts']}") if fronts == [0] else \
        (lambda r: f"n{r['hosts']}_f{r['fronts']}")  # bench.ab's keys as before without fronts
    print(json.dumps({f"{tag(r)}_{k}": v for r in rows for k, v in r.items()
                      if k not in ("hosts", "fronts")}))


if __name__ == "__main__":
    main()
