"""The controller's per-job parts of a gang job, each alone (issue 32 item 4), so that
`bench.ab` can pair them across revisions where the end-to-end figure (bench.gang_e2e)
drowns them in a loaded machine's spread:

    python -m bench.gang_parts [--quick]
    python -m bench.ab main HEAD gang_parts --rounds 5

Each figure is thread CPU (`time.thread_time`), the least of `--repeats` runs:

- fleet_view_us_per_job: `scheduler_view.FleetView.fleet` over 2,400 v5litepod-16 hosts,
  rounds of 75 one-slice gangs: their 300 hosts held (a pass), then the gangs' attempts
  added and the holds cleared (a pass);
- launch_us_per_gang / multislice_launch_us_per_gang: every start command of a one-slice
  (4 tasks) and a two-slice (8) gang built (`launch.launch`, one `gangs` dict per gang, as
  per commit) and encoded (`control.encode`);
- store_rows_us_per_job: `JobStore._write` (the rows, not the commit) for a one-slice gang
  job's events: submitted, its 4 tasks assigned, each running.

The last line printed is one JSON object of every figure.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from iris.controller import scheduler_view
from iris.controller.jobs import events as ev
from iris.controller.jobs.kernel import handle
from iris.controller.jobs.model import Attempt, Job
from iris.controller.jobs.spec import validate_submit
from iris.controller.jobs.state import KernelState
from iris.controller.jobs.store import JobStore, StoreConfig
from iris.controller.launch import launch
from iris.controller.workers import WorkerInfo
from iris.logstore.config import LogStoreConfig
from iris.wire import control

_TPU = "v5litepod-16"


def _spec(name: str, count: int = 1):
    return validate_submit({"name": name, "user": "u", "resources": {"tpu": _TPU, "count": count},
                            "entrypoint": {"kind": "command", "argv": ["python", "t.py"]},
                            "env": {"A": "1"}})


def _workers(n: int) -> dict[str, WorkerInfo]:
    return {f"w{i}": WorkerInfo(
        f"w{i}", f"tcp://10.{i // 62500}.{i // 250 % 250}.{i % 250}:9000", "r1",
        {"region": "r1", "zone": "r1-a", "slice_id": f"s{i // 4}", "accelerator_type": _TPU},
        8.0, 2**34, 4, 0.0, 0.0) for i in range(n)}


def fleet_view(hosts: int = 2400, per_round: int = 75) -> float:
    workers, state = _workers(hosts), KernelState()
    view = scheduler_view.FleetView()
    view.fleet(state, workers, {}, held=())
    ids, spent, jobs = list(workers), 0.0, 0
    for r in range(hosts // (4 * per_round)):
        batch = ids[r * 4 * per_round:(r + 1) * 4 * per_round]
        t = time.thread_time()
        view.fleet(state, workers, {}, held=set(batch))
        spent += time.thread_time() - t
        for k in range(per_round):
            spec = _spec(f"j{r}-{k}")
            state.jobs[spec.name] = Job(spec, 0.0)
            for i in range(4):
                state.add_attempt(Attempt(f"a{r}-{k}-{i}", spec.name, i, 1, batch[4 * k + i]))
            jobs += 1
        t = time.thread_time()
        view.fleet(state, workers, {}, held=())
        spent += time.thread_time() - t
    return spent / jobs * 1e6


def _assigned(count: int) -> tuple[KernelState, list[ev.StartAttempt]]:
    state, n = KernelState(), 4 * count
    state, out = handle(state, ev.Submit("e0", _spec("g", count)), 1.0)
    job = next(e.job_id for e in out if isinstance(e, ev.Accepted))
    state, out = handle(state, ev.Assign("e1", tuple(
        ev.Placement(job, i, f"w{i}", f"a{i}") for i in range(n))), 2.0)
    return state, [e for e in out if isinstance(e, ev.StartAttempt)]


def launches(count: int, reps: int = 50) -> float:
    state, starts = _assigned(count)
    workers, logs = _workers(4 * count), LogStoreConfig(root="/tmp/logs")
    t = time.thread_time()
    for _ in range(reps):
        gangs: dict = {}
        for s in starts:
            control.encode(launch(state, workers, s, "tcp://c:1", logs, 0, gangs))
    return (time.thread_time() - t) / reps * 1e6


def store_rows(jobs: int = 100) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = JobStore(tmp, StoreConfig(synchronous="NORMAL"))
        write, spent = store._write, [0.0]

        def timed(p):
            t = time.thread_time()
            write(p)
            spent[0] += time.thread_time() - t
        store._write = timed
        state, now, seq = KernelState(), 1.0, 0
        for j in range(jobs):
            events = [ev.Submit(f"s{j}", _spec(f"g{j}"))]
            job = f"/u/g{j}"
            events.append(ev.Assign(f"a{j}", tuple(
                ev.Placement(job, i, f"w{j}-{i}", f"att-{j}-{i}") for i in range(4))))
            events += [ev.AttemptRunning(f"r{j}-{i}", f"att-{j}-{i}") for i in range(4)]
            for event in events:
                seq += 1
                state, out = handle(state, event, now + seq)
                store.apply([e for e in out if isinstance(e, ev.Persist)])
        store.close()
    return spent[0] / jobs * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repeats (the default: 15)")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 15)
    result = {
        "fleet_view_us_per_job": min(fleet_view() for _ in range(repeats)),
        "launch_us_per_gang": min(launches(1) for _ in range(repeats)),
        "multislice_launch_us_per_gang": min(launches(2) for _ in range(repeats)),
        "store_rows_us_per_job": min(store_rows() for _ in range(repeats)),
    }
    print(json.dumps({k: round(v, 1) for k, v in result.items()}))


if __name__ == "__main__":
    main()
