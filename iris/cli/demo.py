"""`iris demo`: RL trainer/rollout coordination through actor calls, on an embedded cluster.

Not a benchmark. The trainer lives in this process; the rollouts are the tasks of one job
(`replicas=N`) running in worker processes. The trainer publishes each new weight version
with iris.weights (a dict of named float32 arrays, `--weights` in total: pushed to every
rollout at once; on one host copied once into shared memory that all rollouts map). Each
rollout asks for the newest weights at most one version stale (`Subscriber.get`), "acts",
and pushes its reward to the trainer actor, found by name (`iris.resolve("trainer")` finds
the client's actor from inside the job tree). Every training step prints its weight-sync
time and GB/s; rollout output comes from the log store, as `iris job logs -f` shows it.
"""

from __future__ import annotations

import math
import os
import resource
import sys
import threading
import time
from typing import Any

import numpy as np

import iris
from iris.logstore.model import format_line
from iris.wire.states import TERMINAL_JOB

DEFAULT_WEIGHTS_BYTES = 4 << 20  # 4 MiB: a fast first run; --weights 256MiB for real sizes
_TENSORS = 8  # the weights are this many named arrays, like a small model's layers


def make_weights(total_bytes: int, version: int) -> dict[str, np.ndarray]:
    """Named float32 arrays of `total_bytes` in all, every element equal to the version."""
    per = max(total_bytes // _TENSORS // 4, 1)
    return {f"layer{i}.w": np.full(per, float(version), dtype=np.float32)
            for i in range(_TENSORS)}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


@iris.actor
class Trainer:
    def __init__(self, rollouts_per_step: int, weights_bytes: int, out: Any,
                 steps: int | None = None):
        self.rollouts_per_step = rollouts_per_step
        self.steps = steps  # after the last step no rollout reads weights: nothing to send
        self.weights_bytes = weights_bytes
        self.out = out
        self.buffer: list[dict] = []
        self.rewards: list[float] = []
        self.syncs: list[dict] = []
        # The size is known: its shared memory is made and faulted in while rollouts start.
        self.publisher = iris.weights.Publisher("policy", size_hint=weights_bytes)

    def start(self) -> int:
        """Publish version 1 once the rollouts subscribed (they wait for it)."""
        self._publish()
        return self.publisher.version

    def push_rollout(self, rollout: dict) -> int:
        self.buffer.append(rollout)
        if len(self.buffer) >= self.rollouts_per_step:
            batch, self.buffer = self.buffer, []
            self.rewards.append(round(sum(r["reward"] for r in batch) / len(batch), 4))
            if self.steps is None or len(self.rewards) < self.steps:
                self._publish()  # (the rollouts leave after their last step)
        return self.publisher.version

    def _publish(self) -> None:
        version = self.publisher.version + 1
        weights = make_weights(self.weights_bytes, version)
        t0 = time.perf_counter()
        self.publisher.publish(weights)
        seconds = time.perf_counter() - t0
        receivers = len(iris.resolve_all("/policy.rollouts"))
        failed = len(self.publisher.last_failures)
        sync = {"version": version, "ms": round(seconds * 1e3, 1), "receivers": receivers,
                "failed": failed,
                "gbps_per_rollout": round(self.weights_bytes / seconds / 1e9, 3)}
        self.syncs.append(sync)
        print(f"[demo] step {version - 1}: weights v{version} ({_size(self.weights_bytes)}) "
              f"to {receivers - failed}/{receivers} rollouts in {sync['ms']} ms, "
              f"{sync['gbps_per_rollout'] if receivers else '-'} GB/s per rollout",
              file=self.out, flush=True)

    def summary(self) -> dict:
        return {"steps": len(self.rewards), "rewards": self.rewards, "syncs": self.syncs,
                "trainer_peak_rss_mib": round(peak_rss_mib(), 1)}


def _size(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):g} MiB"


def rollout(iterations: int) -> int:
    """One rollout task: newest weights (at most 1 version stale), "act", push the reward."""
    index = int(os.environ["IRIS_TASK_INDEX"])
    sub = iris.weights.Subscriber("policy", timeout=60)
    trainer = iris.resolve("trainer", timeout=60)
    for i in range(iterations):
        t0 = time.perf_counter()
        version, weights = sub.get(max_stale=1, timeout=120)
        waited = time.perf_counter() - t0
        first = weights["layer0.w"]
        reward = (float(first[0]) + index + i) % 7 / 7
        new_version = trainer.push_rollout({"worker": index, "reward": reward}).result(120)
        size = sum(w.nbytes for w in weights.values())
        print(f"iteration {i}: weights v{version} ({_size(size)}, {first.dtype}, read-only "
              f"{not first.flags.writeable}) after {waited * 1e3:.1f} ms; pushed reward "
              f"{reward:.2f}; trainer now at v{new_version}; peak RSS "
              f"{peak_rss_mib():.0f} MiB", flush=True)
    sub.close()
    return iterations


def run_demo(rollouts: int = 3, iterations: int = 4, out: Any = sys.stdout,
             weights_bytes: int = DEFAULT_WEIGHTS_BYTES) -> dict:
    started = time.perf_counter()
    # Every rollout must run at once (each training step waits for all of them), and a
    # local worker offers its share of this machine (1 CPU each on 2 cores), so the demo
    # asks for enough CPUs per worker: rollouts are light, mostly waiting on the trainer.
    per_worker = float(max(1, math.ceil(rollouts / 2)))
    with iris.local_cluster(workers=2, worker_cpu=per_worker) as cluster:
        print(f"[demo] cluster at {cluster.address} with 2 workers; weights "
              f"{_size(weights_bytes)} in {_TENSORS} arrays", file=out, flush=True)
        trainer = Trainer.serve("trainer", rollouts, weights_bytes, out, iterations)
        # numpy in the tasks' environment: the weights arrive as arrays (same version as here).
        job = iris.submit(rollout, iterations, replicas=rollouts, name="rollouts",
                          pip=[f"numpy=={np.__version__}"])
        print(f"[demo] submitted {job.job_id}: {rollouts} rollout tasks", file=out, flush=True)
        _wait_for_subscribers(rollouts, job)
        trainer.start().result(300)
        for line in job.logs(follow=True):
            print(format_line(line), end="" if line.text.endswith("\n") else "\n", file=out,
                  flush=True)
        status = job.wait(600)
        summary = trainer.summary().result(30)
    summary.update(job=job.job_id, state=status["state"], rollout_tasks=rollouts,
                   weights_bytes=weights_bytes, seconds=round(time.perf_counter() - started, 2))
    syncs = [s for s in summary["syncs"] if s["receivers"]]
    rate = max((s["gbps_per_rollout"] for s in syncs), default=0.0)
    print(f"[demo] job {status['state']}: {summary['steps']} training steps from {rollouts} "
          f"rollout tasks in {summary['seconds']} s; mean rewards {summary['rewards']}; "
          f"fastest weight sync {rate} GB/s per rollout; trainer peak RSS "
          f"{summary['trainer_peak_rss_mib']} MiB", file=out, flush=True)
    if status["state"] != "succeeded":
        raise SystemExit(f"the rollout job ended {status['state']}: {status.get('error')}")
    return summary


def _wait_for_subscribers(count: int, job: Any) -> None:
    """Until every rollout task subscribed (or the job ended): version 1 goes to all."""
    deadline = time.monotonic() + 300
    while len(iris.resolve_all("/policy.rollouts")) < count:
        if time.monotonic() > deadline or job.status()["state"] in TERMINAL_JOB:
            return
        iris.resolve_all("/policy.rollouts", timeout=1.0)
        threading.Event().wait(0.2)
