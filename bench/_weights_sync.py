"""bench.weights' Iris sync step: one trainer (this process) -> R rollout processes.

Modes: "cold" (no size hint: the first publish faults its shared memory in), "hint" (the
Publisher knows the size: shared memory made and faulted in while the rollouts start),
"flip" (the trainer fills Publisher.buffers() in place and publishes those: to this host a
version flip, no copy), "socket" (every process with shared memory off: the chunked chain,
what rollouts on other hosts get).

In "flip" the timed sync is publish() alone: the fill replaces the trainer's own write of
its weights (a device -> host copy it makes anyway), so it is timed apart (`fill_s`: each
tensor np.copyto'd from one host array of a tensor's size, a memcpy as ray.put's) and
`copy_sync_s` is fill + publish: the same copies as Ray's ray.put of host arrays.
Peak RSS is the trainer's VmHWM over the sync step; what the step itself holds at its peak
(`rss_trainer_step_mib`) is that less its VmRSS before the Publisher and the weights were
made (what earlier steps of the run left is not in it).
"""

from __future__ import annotations

import statistics
import time

from bench._procs import Children
from bench._report import step
from bench.weights import TENSORS, MiB, first_and_steady, make_weights, peak_rss_mib, reset_peak


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def iris_sync(cfg: dict, children: Children, env: dict, policy: str, mode: str) -> dict:
    import iris

    socket = mode == "socket"
    if mode == "flip" and not hasattr(iris.weights.Publisher, "buffers"):
        return {}  # a revision from before Publisher.buffers() (bench.ab runs this bench/)
    before = rss_mib()
    pub = iris.weights.Publisher(policy, size_hint=cfg["size"] if mode == "hint" else 0)
    env = {**env, "POLICY": policy, **({"IRIS_SHM_MIN_BYTES": "0"} if socket else {})}
    rollouts = [children.spawn(["-m", "bench.weights", "--serve", "rollout"], env)
                for _ in range(cfg["receivers"])]
    pids = [int(r.expect("READY")) for r in rollouts]
    group = iris.resolve_all(f"{policy}.rollouts", timeout=60)
    while len(group) < len(pids):
        group = iris.resolve_all(f"{policy}.rollouts", timeout=60)
    probes = [iris.resolve(f"rollout-{pid}", timeout=60) for pid in pids]
    weights = None if mode == "flip" else make_weights(cfg["size"], seed=1)
    for probe in probes:
        probe.reset_peak().result(60)
    reset_peak()
    how = {"cold": "shared memory, no size hint", "hint": "shared memory, size hint",
           "flip": "buffers() filled in place: a version flip",
           "socket": "chunked chain, socket"}[mode]
    step(f"iris sync {cfg['size'] // MiB} MiB -> {len(pids)} rollouts ({how})")
    out: dict = {}
    if mode == "flip":
        first, seconds, out["fill_s"] = _flip(pub, cfg)
        out["copy_sync_s"] = seconds + out["fill_s"]
    else:
        def sync():
            pub.publish(weights)
            if pub.last_failures:
                raise RuntimeError(f"iris sync failed for {pub.last_failures}")

        first, seconds = first_and_steady(sync, cfg["sync_reps"])
    rss = [probe.peak_rss().result(60) for probe in probes]
    for child in rollouts:
        child.kill()
    pub.close()
    # All links of a chain share this machine's cores; on separate hosts each has its own:
    # the bytes all links moved per second is the figure to hold against the socket floor.
    return {**out, "sync_s": seconds, "sync_gbps_per_receiver": cfg["size"] / seconds / 1e9,
            "sync_gbps_all_links": len(pids) * cfg["size"] / seconds / 1e9,
            "sync_first_s": first, "rss_trainer_mib": peak_rss_mib(),
            "rss_trainer_step_mib": peak_rss_mib() - before, "rss_receiver_max_mib": max(rss),
            "rss_receivers_mib": rss}


def _flip(pub, cfg: dict) -> tuple[float, float, float]:
    """(first publish s, median publish s, median fill s): each version copied into
    pub.buffers() in place from one source of a tensor's size (the trainer holds no copy
    of the whole weights), then published."""
    import numpy as np

    per = cfg["size"] // TENSORS // 4
    layout = {f"layer{i}.w": ((per,), "float32") for i in range(TENSORS)}
    source = np.ones(per, dtype=np.float32)
    times, fills = [], []
    for i in range(cfg["sync_reps"] + 1):
        buffers = pub.buffers(layout if i == 0 else None)
        source[0] = i
        t0 = time.perf_counter()
        for array in buffers.values():
            np.copyto(array, source)
        fills.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pub.publish(buffers)
        times.append(time.perf_counter() - t0)
        if pub.last_failures:
            raise RuntimeError(f"iris sync failed for {pub.last_failures}")
    return times[0], statistics.median(times[1:]), statistics.median(fills[1:])
