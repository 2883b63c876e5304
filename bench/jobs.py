"""Benchmark of jobs (issues 3 and 4): Iris's local cluster beside Ray, in one run, one machine.

    python -m bench.jobs [--quick] [--jobs N] [--threads K] [--only iris|ray]

Not a test: it asserts nothing about speed. Every Iris job is a trivial callable
(`started_at`: returns the CLOCK_MONOTONIC time its code began, one clock for every process
on the host), submitted with `iris.submit` to a local cluster of 2 worker processes (8 cpu
each, so 16 jobs run at once) whose job environment is already built. What each figure is:

- jobs_s_1thread: N jobs; one thread submits them all back to back (each submit waits for
  the controller's reply, not for the job), then awaits each `result()` in order.
  jobs/s = N / (first submit called -> last result returned).
- jobs_s_Kthreads: the same N jobs split over K threads, each submitting its share back to
  back and then awaiting its own results; same formula (first submit of any thread to last
  result of any thread).
- submit_*_ms: how long `iris.submit()` takes to return; "seq" is one job at a time (submit,
  then wait for its result before the next), "pipelined" is during the 1-thread run above.
- roundtrip_*_ms: one job at a time, submit called -> `result()` returned; split into
  submit_to_running (submit called -> user code running) and running_to_result.
- cold_start_s: in a fresh interpreter that has done `import iris`, `iris.local_cluster(
  workers=1)` entered -> the first job's user code running (includes starting the worker
  process and building the job's uv venv from uv's warm cache). cold_from_spawn_s adds
  the interpreter start and the imports (Popen -> user code running); cold_first_result_s
  runs to the first result returned; cold_up_s is the `local_cluster` entry itself (worker
  registered) and cold_first_task_s the rest (submit, venv build, zygote start, fork). Ray's: `ray.init()` called -> a trivial @ray.remote
  function's code running / its result returned, also in a fresh interpreter.
- ray_jobs_s: 1,000 (N) `f.remote()` then one `ray.get` of all, after one warm-up round
  (ray_jobs_s_first_round: that warm-up round, while Ray starts its worker pool); Ray runs
  tasks in worker processes it keeps, Iris forks a process per job. ray_roundtrip:
  `ray.get(f.remote())` one at a time. Ray's default `ray.init()`.
- worker_kill_rerun_s: a 2-worker cluster (both warm) runs a long task; the worker process
  running it is SIGKILLed; seconds from the kill to the rerun's user code running on the
  other worker (the issue's budget: 6 s). worker_kill_lost_s: kill -> the controller no
  longer lists the worker (polled every 20 ms). Fresh cluster per repetition.
- cpu_ms_per_job_*: CPU time per job during the two throughput runs, of this process
  (client + controller + registry, all in-process), of the worker processes, of their
  zygotes plus the tasks those forked, and of the whole machine (neighbours included);
  machine_busy_pct: the machine's busy share of all cores meanwhile.

The last line printed is one JSON object of every figure; Ray's carry the prefix `ray_`.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import statistics
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from bench._jobs_procs import (
    noop,
    run_child,
    started_at,
    summary,
    worker_kill_once,
)
from bench._procs import exit_cleanly_on_signals
from bench._report import fmt, peer_installed, step
from iris.base.clock import SYSTEM_CLOCK


@dataclass(frozen=True)
class Settings:
    jobs: int         # jobs per throughput run (the issue asks for 1,000)
    threads: int      # submitting threads in the concurrent run
    seq: int          # one-at-a-time jobs for submit latency and round trip
    cold_reps: int    # fresh-interpreter cold starts, each side
    kill_reps: int    # worker SIGKILLs, one fresh cluster each
    ray_rounds: int   # measured rounds of `jobs` Ray tasks (after a warm-up round)


_FULL = Settings(jobs=1000, threads=4, seq=300, cold_reps=3, kill_reps=5, ray_rounds=3)
# ~30 s on a loaded 2-core machine: Ray's init alone takes 4-5 s, each kill ~5 s.
_QUICK = Settings(jobs=400, threads=4, seq=60, cold_reps=1, kill_reps=2, ray_rounds=1)
_RESULT_TIMEOUT_S = 300.0


def _now() -> float:
    return SYSTEM_CLOCK.monotonic()


# ---------------------------------------------------------------- Iris throughput and latency


class _CpuMeter:
    """CPU seconds since construction: this process, the workers, the workers' children.

    The workers' children are their zygotes, whose counters include the attempts they forked
    and reaped (cutime/cstime), so "children" is zygotes plus tasks. Also the whole machine's
    busy share (/proc/stat), since neighbours on a shared machine take cores too.
    """

    def __init__(self, worker_pids: list[int]):
        self._workers = worker_pids
        self._children = [c for p in worker_pids for c in _children(p)]
        self._start = self._read()

    def _read(self) -> tuple[float, ...]:
        mine = os.times()
        workers = sum(_proc_cpu(p, reaped=False) for p in self._workers)
        children = sum(_proc_cpu(p, reaped=True) for p in self._children)
        cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = cpu[3] + cpu[4]  # idle + iowait
        ticks = os.sysconf("SC_CLK_TCK")
        return (mine.user + mine.system, workers, children, (sum(cpu) - idle) / ticks,
                sum(cpu) / ticks)

    def figures(self, jobs: int) -> dict:
        end = self._read()
        d = [b - a for a, b in zip(self._start, end, strict=True)]
        return {"cpu_ms_per_job_client_controller": d[0] * 1000 / jobs,
                "cpu_ms_per_job_workers": d[1] * 1000 / jobs,
                "cpu_ms_per_job_zygotes_tasks": d[2] * 1000 / jobs,
                "cpu_ms_per_job_machine": d[3] * 1000 / jobs,
                "machine_busy_pct": 100 * d[3] / d[4] if d[4] else 0.0}


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(c) for c in task.read_text().split()]
    return found


def _proc_cpu(pid: int, reaped: bool) -> float:
    """utime + stime of `pid` (+ of its reaped children when `reaped`), s; 0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    fields = stat[11:15] if reaped else stat[11:13]
    return sum(int(f) for f in fields) / os.sysconf("SC_CLK_TCK")


def _sequential(iris, n: int) -> dict:
    submit, to_running, to_result = [], [], []
    for _ in range(n):
        t0 = _now()
        job = iris.submit(started_at)
        t1 = _now()
        running = job.result(timeout=_RESULT_TIMEOUT_S)
        t2 = _now()
        submit.append(t1 - t0)
        to_running.append(running - t0)
        to_result.append(t2 - t0)
    return {"submit_seq": submit, "submit_to_running": to_running, "roundtrip": to_result}


def _submit_then_await(iris, n: int, submit_times: list[float] | None = None) -> tuple[float, float]:
    """Submit n jobs back to back, then await each; (first submit called, last result)."""
    first = _now()
    jobs = []
    for _ in range(n):
        t0 = _now()
        jobs.append(iris.submit(started_at))
        if submit_times is not None:
            submit_times.append(_now() - t0)
    for job in jobs:
        job.result(timeout=_RESULT_TIMEOUT_S)
    return first, _now()


def _threaded(iris, n: int, threads: int) -> tuple[float, float]:
    shares = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
    spans: list[tuple[float, float]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def run(share: int) -> None:
        try:
            barrier.wait()
            spans.append(_submit_then_await(iris, share))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    # Each thread needs the cluster as its current context (a ContextVar; threads start empty).
    workers = [threading.Thread(target=contextvars.copy_context().run, args=(run, share))
               for share in shares]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    if errors:
        raise errors[0]
    return min(s for s, _ in spans), max(e for _, e in spans)


def bench_iris(cfg: Settings) -> dict:
    import iris

    with tempfile.TemporaryDirectory(prefix="iris-bench-jobs-") as tmp, \
            iris.local_cluster(workers=2, worker_cpu=8, state_dir=tmp,
                               stop_grace_s=2.0) as ctx:
        rows = ctx.node.call(ctx.address, "/iris/controller", "list_workers").result(30)
        worker_pids = [int(w["attributes"]["pid"]) for w in rows]
        # Both workers build the job environment and start its zygote before anything counts.
        iris.submit(noop, replicas=2, resources=iris.Resources(cpu=8)).result(timeout=300)
        step("iris: one job at a time")
        seq = _sequential(iris, cfg.seq)
        step(f"iris: {cfg.jobs} jobs from 1 thread")
        pipelined: list[float] = []
        meter = _CpuMeter(worker_pids)
        first, last = _submit_then_await(iris, cfg.jobs, pipelined)
        one = cfg.jobs / (last - first)
        step(f"iris: {cfg.jobs} jobs from {cfg.threads} threads")
        first, last = _threaded(iris, cfg.jobs, cfg.threads)
        many = cfg.jobs / (last - first)
        cpu = meter.figures(2 * cfg.jobs)
    out = {"jobs_s_1thread": one, f"jobs_s_{cfg.threads}threads": many, **cpu}
    out.update(_ms(seq["submit_seq"], "submit_seq"))
    out.update(_ms(pipelined, "submit_pipelined"))
    out.update(_ms(seq["roundtrip"], "roundtrip"))
    out.update(_ms(seq["submit_to_running"], "submit_to_running"))
    out.update(_ms([b - a for a, b in zip(seq["submit_to_running"], seq["roundtrip"],
                                          strict=True)], "running_to_result"))
    return out


def _ms(values: list[float], name: str) -> dict:
    stats = summary(values)
    return {f"{name}_median_ms": stats["median"] * 1000, f"{name}_p99_ms": stats["p99"] * 1000}


# ---------------------------------------------------------------- cold starts, Ray, kills


def bench_cold_iris(cfg: Settings) -> dict:
    runs = []
    for i in range(cfg.cold_reps):
        step(f"iris: cold start {i + 1}/{cfg.cold_reps} (fresh interpreter)")
        runs.append(run_child("iris-cold"))
    return _cold_figures(runs, "")


def _cold_figures(runs: list[dict], prefix: str) -> dict:
    def med(key: str, since: str) -> float:
        return statistics.median(r[key] - r[since] for r in runs)

    return {f"{prefix}cold_start_s": med("running", "entered"),
            f"{prefix}cold_first_result_s": med("result", "entered"),
            f"{prefix}cold_from_spawn_s": med("running", "spawned"),
            f"{prefix}cold_import_s": med("imported", "exec"),
            f"{prefix}cold_up_s": med("up", "entered"),
            f"{prefix}cold_first_task_s": med("running", "up")}


def bench_ray(cfg: Settings) -> dict:
    runs = []
    reps = max(1, min(cfg.cold_reps, 2))  # each is a full ray.init + shutdown (~6 s here)
    for i in range(reps):
        step(f"ray: fresh interpreter {i + 1}/{reps}: ray.init, first task, {cfg.jobs} tasks")
        runs.append(run_child("ray", "--tasks", str(cfg.jobs), "--rounds", str(cfg.ray_rounds),
                              "--seq", str(cfg.seq)))
    rounds = [s for r in runs for s in r["round_s"]]
    out = _cold_figures(runs, "ray_")
    out["ray_jobs_s"] = cfg.jobs / statistics.median(rounds)
    out["ray_jobs_s_first_round"] = cfg.jobs / statistics.median(r["first_round_s"] for r in runs)
    out.update(_ms([s for r in runs for s in r["roundtrip_s"]], "ray_roundtrip"))
    return out


def bench_kills(cfg: Settings) -> dict:
    runs = []
    for i in range(cfg.kill_reps):
        step(f"iris: worker SIGKILL {i + 1}/{cfg.kill_reps}")
        with tempfile.TemporaryDirectory(prefix="iris-bench-kill-") as tmp:
            run = worker_kill_once(Path(tmp))
        if not run["moved"] or run["preemptions"] != 1 or run["failures"] != 0:
            raise RuntimeError(f"the rerun did not go as expected: {run}")
        runs.append(run)
    rerun, lost = (summary([r[k] for r in runs]) for k in ("rerun_s", "lost_seen_s"))
    return {"worker_kill_rerun_median_s": rerun["median"], "worker_kill_rerun_max_s": rerun["max"],
            "worker_kill_lost_median_s": lost["median"]}


# ---------------------------------------------------------------- report


# (key, label, unit, Ray's key or None)
def _rows(cfg: Settings) -> list[tuple[str, str, str, str | None]]:
    k = cfg.threads
    return [
        ("jobs_s_1thread", f"{cfg.jobs} jobs, 1 submitting thread", "jobs/s", "ray_jobs_s"),
        ("-", "  Ray's first round (pool starting)", "jobs/s", "ray_jobs_s_first_round"),
        (f"jobs_s_{k}threads", f"{cfg.jobs} jobs, {k} submitting threads", "jobs/s", None),
        ("submit_seq_median_ms", "submit(), one at a time, median", "ms", None),
        ("submit_seq_p99_ms", "submit(), one at a time, p99", "ms", None),
        ("submit_pipelined_median_ms", "submit(), back to back, median", "ms", None),
        ("submit_pipelined_p99_ms", "submit(), back to back, p99", "ms", None),
        ("roundtrip_median_ms", "one job: submit -> result, median", "ms",
         "ray_roundtrip_median_ms"),
        ("roundtrip_p99_ms", "one job: submit -> result, p99", "ms", "ray_roundtrip_p99_ms"),
        ("submit_to_running_median_ms", "  of which submit -> code running", "ms", None),
        ("running_to_result_median_ms", "  of which code running -> result", "ms", None),
        ("cold_start_s", "cold: cluster/init -> code running", "s", "ray_cold_start_s"),
        ("cold_first_result_s", "cold: cluster/init -> first result", "s",
         "ray_cold_first_result_s"),
        ("cold_from_spawn_s", "cold: Popen -> code running", "s", "ray_cold_from_spawn_s"),
        ("cold_import_s", "  of which import iris / ray", "s", "ray_cold_import_s"),
        ("cold_up_s", "  of which local_cluster / ray.init", "s", "ray_cold_up_s"),
        ("cold_first_task_s", "  of which cluster up -> code running", "s",
         "ray_cold_first_task_s"),
        ("worker_kill_rerun_median_s", "worker SIGKILL -> rerun running, median", "s", None),
        ("worker_kill_rerun_max_s", "worker SIGKILL -> rerun running, max", "s", None),
        ("worker_kill_lost_median_s", "  of which kill -> worker dropped", "s", None),
        ("cpu_ms_per_job_client_controller", "CPU/job, client+controller process", "ms", None),
        ("cpu_ms_per_job_workers", "CPU/job, worker processes", "ms", None),
        ("cpu_ms_per_job_zygotes_tasks", "CPU/job, zygotes + their tasks", "ms", None),
        ("cpu_ms_per_job_machine", "CPU/job, whole machine (all users)", "ms", None),
        ("machine_busy_pct", "machine CPU busy during those runs", "%", None),
    ]


def print_table(figures: dict, cfg: Settings) -> None:
    print(f"\njobs on a local cluster, {os.cpu_count()} cores (definitions: python -m "
          f"bench.jobs --help)")
    print(f"{'metric':42} {'unit':>7} {'iris':>10} {'ray':>10}")
    for key, label, unit, ray_key in _rows(cfg):
        if key in figures or (ray_key and ray_key in figures):
            print(f"{label:42} {unit:>7} {fmt(figures.get(key)):>10} "
                  f"{fmt(figures.get(ray_key) if ray_key else None):>10}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--only", choices=("iris", "ray"), help="measure one system only")
    parser.add_argument("--jobs", type=int, help="jobs per throughput run")
    parser.add_argument("--threads", type=int, help="submitting threads in the concurrent run")
    args = parser.parse_args(argv)
    cfg = _QUICK if args.quick else _FULL
    overrides = {k: v for k, v in (("jobs", args.jobs), ("threads", args.threads)) if v}
    if any(v < 1 for v in overrides.values()):
        parser.error(f"--jobs and --threads must be at least 1, got {overrides}")
    cfg = Settings(**{**cfg.__dict__, **overrides})
    exit_cleanly_on_signals()  # SIGTERM unwinds, so clusters and Ray still shut down
    started = _now()
    figures: dict = {}
    if args.only != "ray":
        figures.update(bench_cold_iris(cfg))
        figures.update(bench_iris(cfg))
        figures.update(bench_kills(cfg))
    if args.only != "iris" and peer_installed():
        figures.update(bench_ray(cfg))
    print_table(figures, cfg)
    figures.update(jobs=cfg.jobs, threads=cfg.threads, seq=cfg.seq, cold_reps=cfg.cold_reps,
                   kill_reps=cfg.kill_reps, quick=args.quick, wall_s=_now() - started)
    figures = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
