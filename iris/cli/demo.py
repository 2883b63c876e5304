"""`iris demo`: RL trainer/rollout coordination through actor calls, on an embedded cluster.

Not a benchmark. The trainer actor lives in this process; the rollouts are the tasks of one
job (`replicas=N`) running in worker processes. Each task resolves the trainer by name
(`iris.resolve("trainer")` finds the client's actor from inside the job tree), pulls the
weights (a few MB, sent as an out-of-band frame, never copied into the envelope), and
pushes rollouts back. Their output comes from the log store, as `iris job logs -f` shows it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import iris
from iris.logstore.model import format_line

WEIGHTS_BYTES = 4 << 20  # 4 MiB: big enough that zero-copy transfer matters


@iris.actor
class Trainer:
    def __init__(self, rollouts_per_step: int):
        self.version = 0
        self.rollouts_per_step = rollouts_per_step
        self.buffer: list[dict] = []
        self.rewards: list[float] = []
        self.weights = bytes(WEIGHTS_BYTES)

    def get_weights(self) -> tuple[int, bytes]:
        return self.version, self.weights

    async def push_rollout(self, rollout: dict) -> int:
        self.buffer.append(rollout)
        if len(self.buffer) >= self.rollouts_per_step:
            self._train_step()
        return self.version

    def _train_step(self) -> None:
        batch, self.buffer = self.buffer, []
        mean = sum(r["reward"] for r in batch) / len(batch)
        self.rewards.append(round(mean, 4))
        self.version += 1
        # New weights: a cheap deterministic function of the version, same size.
        self.weights = self.version.to_bytes(4, "little") * (WEIGHTS_BYTES // 4)

    async def summary(self) -> dict:
        return {"steps": self.version, "rewards": self.rewards}


def rollout(iterations: int) -> int:
    """One rollout task: pull weights, "act", push the reward; `iterations` times."""
    index = int(os.environ["IRIS_TASK_INDEX"])
    trainer = iris.resolve("trainer", timeout=60)
    for i in range(iterations):
        version, weights = trainer.get_weights().result(60)
        reward = (weights[0] + index + i) % 7 / 7
        new_version = trainer.push_rollout({"worker": index, "reward": reward}).result(60)
        print(f"iteration {i}: pulled weights v{version} ({len(weights) >> 20} MiB), "
              f"pushed reward {reward:.2f}; trainer now at v{new_version}", flush=True)
    return iterations


def run_demo(rollouts: int = 3, iterations: int = 4, out: Any = sys.stdout) -> dict:
    started = time.perf_counter()
    with iris.local_cluster(workers=2) as cluster:
        print(f"[demo] cluster at {cluster.address} with 2 workers", file=out, flush=True)
        trainer = Trainer.serve("trainer", rollouts)
        job = iris.submit(rollout, iterations, replicas=rollouts, name="rollouts")
        print(f"[demo] submitted {job.job_id}: {rollouts} rollout tasks", file=out, flush=True)
        for line in job.logs(follow=True):
            print(format_line(line), end="" if line.text.endswith("\n") else "\n", file=out,
                  flush=True)
        status = job.wait(300)
        summary = trainer.summary().result(30)
    summary.update(job=job.job_id, state=status["state"], rollout_tasks=rollouts,
                   seconds=round(time.perf_counter() - started, 2))
    print(f"[demo] job {status['state']}: {summary['steps']} training steps from {rollouts} "
          f"rollout tasks in {summary['seconds']} s; mean rewards {summary['rewards']}",
          file=out, flush=True)
    if status["state"] != "succeeded":
        raise SystemExit(f"the rollout job ended {status['state']}: {status.get('error')}")
    return summary
