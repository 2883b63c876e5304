"""`iris demo`: RL trainer/rollout coordination through actor calls, on an embedded cluster.

Not a benchmark. The trainer actor lives in this process; each rollout worker is a separate
Python process that joins the cluster, resolves the trainer by name, pulls the weights
(a few MB, sent as an out-of-band frame, never copied into the envelope), and pushes
rollouts back. When jobs land (issue 3) the rollouts become tasks of one job tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

import iris

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
        self.rewards.append(mean)
        self.version += 1
        # New weights: a cheap deterministic function of the version, same size.
        self.weights = self.version.to_bytes(4, "little") * (WEIGHTS_BYTES // 4)
        print(f"[trainer] step {self.version}: {len(batch)} rollouts, mean reward {mean:.3f}",
              flush=True)

    async def summary(self) -> dict:
        return {"steps": self.version, "rewards": self.rewards}


ROLLOUT = """
import os, sys
import iris

index = int(sys.argv[1]); iterations = int(sys.argv[2])
ctx = iris.connect()
trainer = iris.resolve("trainer", timeout=60)
for i in range(iterations):
    version, weights = trainer.get_weights().result(60)
    reward = (weights[0] + index + i) % 7 / 7
    new_version = trainer.push_rollout({"worker": index, "version": version,
                                        "reward": reward}).result(60)
    print(f"[rollout {index}] iteration {i}: pulled weights v{version} "
          f"({len(weights) >> 20} MiB), pushed reward {reward:.2f}", flush=True)
ctx.close()
"""


def run_demo(rollouts: int = 3, iterations: int = 4, out: Any = sys.stdout) -> dict:
    started = time.perf_counter()
    with iris.local_cluster() as cluster:
        print(f"[demo] cluster at {cluster.address}", file=out, flush=True)
        trainer = Trainer.serve("trainer", rollouts)
        env = {**os.environ, "IRIS_ADDRESS": cluster.address}
        procs = [subprocess.Popen([sys.executable, "-c", ROLLOUT, str(i), str(iterations)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for i in range(rollouts)]
        pumps = [threading.Thread(target=_pump, args=(p, out), daemon=True) for p in procs]
        for pump in pumps:
            pump.start()
        codes = [p.wait(timeout=300) for p in procs]
        for pump in pumps:
            pump.join(10)
        summary = trainer.summary().result(30)
    summary["rollout_workers"] = rollouts
    summary["exit_codes"] = codes
    summary["seconds"] = round(time.perf_counter() - started, 2)
    print(f"[demo] {summary['steps']} training steps from {rollouts} rollout processes in "
          f"{summary['seconds']} s; exit codes {codes}", file=out, flush=True)
    if any(codes):
        raise SystemExit(f"a rollout process failed (exit codes {codes})")
    return summary


def _pump(proc: subprocess.Popen, out: Any) -> None:
    for line in proc.stdout:
        out.write(line)
        out.flush()
