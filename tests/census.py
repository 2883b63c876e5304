"""Where the suite's time goes (issue 33): `pytest --census FILE` records, per test, its wall
time, the CPU seconds it used (this process and the children it reaped), and what it
started (clusters, worker processes, other subprocesses); `python tests/census.py FILE`
prints the tables that tests/README.md keeps.

A pytest plugin loaded by tests/conftest.py; without --census it does nothing.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import Counter

import pytest

_counts: Counter = Counter()


def _kind(argv) -> str:
    """What a started subprocess is, from its argv."""
    words = [os.path.basename(str(a)) for a in (argv if isinstance(argv, list | tuple)
                                                 else [argv])]
    text = " ".join(words)
    if "iris" in words and "worker" in words:
        return "worker"
    if any(w.startswith(("slurm", "munged", "sbatch", "srun", "scontrol", "squeue",
                         "sinfo", "scancel")) for w in words):
        return "slurm"
    if "ray" in text:
        return "ray"
    if words and words[0].startswith("python"):
        return "python"
    return "other"


def _audit(event: str, args) -> None:
    if event == "subprocess.Popen":
        _counts["proc_" + _kind(args[1])] += 1
    elif event == "os.fork":
        _counts["forks"] += 1


def _count_controllers() -> None:
    """Count controllers this process hosts: one per local cluster (or hand-built one)."""
    from iris.controller import main

    original = main.host_controller

    def counted(*args, **kwargs):
        _counts["clusters"] += 1
        return original(*args, **kwargs)

    main.host_controller = counted


def _cpu_s() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def pytest_addoption(parser) -> None:
    parser.addoption("--census", metavar="FILE", default=None,
                     help="append one JSON line per test (wall, CPU, what it started)")


def pytest_configure(config) -> None:
    if config.getoption("--census") and not hasattr(sys, "_iris_census"):
        sys._iris_census = True  # an audit hook cannot be removed: add it once
        sys.addaudithook(_audit)
        _count_controllers()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = item.config.getoption("--census")
    _counts.clear()
    wall, cpu = time.monotonic(), _cpu_s()
    yield
    if not path:
        return
    row = {"test": item.nodeid, "wall": round(time.monotonic() - wall, 3),
           "cpu": round(_cpu_s() - cpu, 3), "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
           "phases": getattr(item, "_census_phases", {}),
           "failed": getattr(item, "_census_failed", ""), **_counts}
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if item.config.getoption("--census"):
        item.__dict__.setdefault("_census_phases", {})[call.when] = round(call.duration, 3)
        if outcome.get_result().failed:
            item.__dict__["_census_failed"] = call.when


def _report(path: str, top: int = 30) -> str:
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    wall = sum(r["wall"] for r in rows)
    cpu = sum(r["cpu"] for r in rows)
    totals = Counter()
    for r in rows:
        totals.update({k: v for k, v in r.items() if isinstance(v, int)})
    out = [f"{len(rows)} tests; {wall:.0f} s of test wall time summed over the workers, "
           f"{cpu:.0f} CPU-s used by the tests and the processes they reaped "
           f"(waiting: {max(wall - cpu, 0):.0f} s, {100 * max(wall - cpu, 0) / wall:.0f} %)",
           f"started: {totals['clusters']} local clusters (controllers), "
           f"{totals['proc_worker']} `iris worker` processes, {totals['proc_python']} other "
           f"Python processes, {totals['proc_slurm']} Slurm commands/daemons, "
           f"{totals['proc_ray']} Ray processes, {totals['proc_other']} other, "
           f"{totals['forks']} forks",
           *(f"FAILED in {r['failed']}: {r['test']}" for r in rows if r.get("failed")), "",
           "| test | wall s | CPU s | setup s | teardown s | started |",
           "|---|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: -r["wall"])[:top]:
        started = ", ".join(f"{k.removeprefix('proc_')} {v}" for k, v in r.items()
                            if isinstance(v, int) and v)
        out.append(f"| `{r['test']}` | {r['wall']:.1f} | {r['cpu']:.1f} | "
                   f"{r['phases'].get('setup', 0):.1f} | {r['phases'].get('teardown', 0):.1f}"
                   f" | {started} |")
    by_dir = Counter()
    cpu_dir = Counter()
    n_dir = Counter()
    for r in rows:
        key = "/".join(r["test"].split("::")[0].split("/")[:2])
        by_dir[key] += r["wall"]
        cpu_dir[key] += r["cpu"]
        n_dir[key] += 1
    out += ["", "| directory | tests | wall s | CPU s |", "|---|---:|---:|---:|"]
    for key, w in by_dir.most_common():
        out.append(f"| {key} | {n_dir[key]} | {w:.0f} | {cpu_dir[key]:.0f} |")
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--durations"]:  # refresh tests/durations.json from a census file
        from scheduling import DURATIONS, durations_from_census

        with open(DURATIONS, "w") as f:
            json.dump(durations_from_census(*sys.argv[2:]), f, indent=0)
            f.write("\n")
    else:
        print(_report(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30))
