"""Task functions the cluster tests submit (shipped to workers by value)."""

from __future__ import annotations

import os
import time


def hold_until(path: str) -> str:
    """Keep the task (and its host) running until the test creates `path` (bounded: 300 s);
    returns the task's index."""
    deadline = time.monotonic() + 300
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.environ.get("IRIS_TASK_INDEX", "")


GANG_ENV = ("IRIS_TASK_INDEX", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
            "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "MEGASCALE_COORDINATOR_ADDRESS",
            "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR",
            "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")


def gang_env(path: str) -> dict[str, str]:
    """Hold like `hold_until`, then print and return the gang variables this task got."""
    hold_until(path)
    env = {k: os.environ[k] for k in GANG_ENV if k in os.environ}
    print(" ".join(f"{k}={v}" for k, v in sorted(env.items())), flush=True)
    return env
