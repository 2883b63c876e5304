"""Wall time of the ported Ray program (examples/ray_port) on Iris and on Ray (issue 28).

    python -m bench.ps_port [--quick]

The last line printed is one JSON object of the figures.

Runs, in one process, alternating: the original Ray program (ps_ray.py) on a local Ray
head (the peer), its port with iris.compat.ray (ps_compat.py) on the Ray backend and on an
Iris local cluster (2 workers x 4 CPUs), and the native port (ps_iris.py) on both. Each
row: seconds of `run(cfg)` (data put, synchronous and asynchronous training, the sweep),
and the synchronous run's weight checksum, equal on every row (the programs are one).
--quick: a smaller problem (about a quarter of the steps).
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from dataclasses import asdict

import iris
from examples.ray_port import ps_compat, ps_iris, ps_ray


def _config(quick: bool) -> dict:
    if quick:
        return dict(samples=1000, sync_steps=10, async_updates=20, eval_every=5,
                    sweep_steps=20)
    return asdict(ps_ray.Config())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller problem")
    args = parser.parse_args(argv)
    cfg = _config(args.quick)
    rows: dict[str, dict] = {}
    with ExitStack() as stack:
        import ray

        ray.init(num_cpus=8, object_store_memory=200 << 20, include_dashboard=False,
                 log_to_driver=False)
        stack.callback(ray.shutdown)
        from iris.backends.ray.backend import RayBackend

        backends = {"ray": RayBackend(),
                    "iris": stack.enter_context(iris.local_cluster(workers=2, worker_cpu=4))}
        ps_compat.ray.init(runtime_env={"pip": ["numpy"]})
        runs = [("ray_original", None, lambda: ps_ray.run(ps_ray.Config(**cfg)))]
        for kind in ("iris", "ray"):
            runs.append((f"compat_on_{kind}", kind,
                         lambda: ps_compat.run(ps_compat.Config(**cfg))))
            runs.append((f"native_on_{kind}", kind, lambda: ps_iris.run(ps_iris.Config(**cfg))))
        for label, kind, fn in runs:
            if kind is None:
                result = fn()
            else:
                with iris.backend(backends[kind]):
                    result = fn()
            rows[label] = {"seconds": result["seconds"],
                           "checksum": round(result["sync"]["checksum"], 4),
                           "sync_accuracy": result["sync"]["accuracy"],
                           "async_accuracy": result["async"]["accuracy"]}
            print(f"{label:18s} {rows[label]}", flush=True)
    same = len({r["checksum"] for r in rows.values()}) == 1
    figures = {"quick": args.quick, "runs": rows, "same_weights": same,
               "iris_over_ray_compat": round(rows["compat_on_ray"]["seconds"]
                                             / rows["compat_on_iris"]["seconds"], 2),
               "iris_over_ray_native": round(rows["native_on_ray"]["seconds"]
                                             / rows["native_on_iris"]["seconds"], 2)}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
