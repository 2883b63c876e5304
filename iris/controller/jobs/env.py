"""What a task is told: the environment variables of one attempt. Pure; not how it is launched.

The job's own `env` comes first and Iris's variables override it, so a user cannot accidentally
point a task at the wrong controller or the wrong JAX process id.

A gang's task also learns where it stands in the gang, in the variables its framework reads:

- every gang: JAX_COORDINATOR_ADDRESS (the leader's host and a port), JAX_NUM_PROCESSES,
  JAX_PROCESS_ID (its position in the gang);
- a TPU gang, per slice as on a TPU VM: TPU_WORKER_ID (the host's index in its slice) and
  TPU_WORKER_HOSTNAMES (the slice's hosts, by index); with several slices, multi-slice JAX's
  MEGASCALE_COORDINATOR_ADDRESS (host 0 of slice 0), MEGASCALE_NUM_SLICES and
  MEGASCALE_SLICE_ID, as GKE's JobSet sets them;
- a GPU gang, for torch.distributed: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, and
  LOCAL_RANK / LOCAL_WORLD_SIZE (one task per host). CUDA_VISIBLE_DEVICES is the worker's
  to set: only it knows which of its GPUs are free.
"""

from __future__ import annotations

from collections.abc import Sequence

from iris.controller.jobs.spec import JobSpec


def task_environment(spec: JobSpec, task_index: int, attempt_id: str, *,
                     controller_address: str, coordinator_address: str | None = None,
                     gang_hosts: Sequence[str] = ()) -> dict[str, str]:
    """Variables for attempt `attempt_id` of task `task_index` of the job `spec`.

    For a multi-host gang, `coordinator_address` ("host:port" of the gang's first task) is
    required: every process of the gang must dial the same JAX coordinator. `gang_hosts`
    names the host of each task of the gang, by position (unknown hosts read 127.0.0.1).
    The shared part and the task's own, merged (see shared_environment).
    """
    env = shared_environment(spec, controller_address=controller_address,
                             coordinator_address=coordinator_address)
    env.update(own_environment(spec, task_index, attempt_id,
                               coordinator_address=coordinator_address, gang_hosts=gang_hosts))
    return env


def shared_environment(spec: JobSpec, *, controller_address: str,
                       coordinator_address: str | None = None) -> dict[str, str]:
    """The variables every task of a gang (or of a job without gangs) shares: the job's own
    `env` overridden by Iris's. Built once per gang for its starts (controller/launch.py);
    `own_environment` goes over it (a task's own variables override the job's `env` too)."""
    env = dict(spec.env)
    env.update({
        "IRIS_ADDRESS": controller_address,
        "IRIS_JOB_ID": spec.name,
        "IRIS_NUM_TASKS": str(spec.num_tasks),
    })
    if spec.gang_size > 1:
        if not coordinator_address:
            raise ValueError(f"job {spec.name}: a gang of {spec.gang_size} needs a "
                             "coordinator address")
        env.update({"JAX_COORDINATOR_ADDRESS": coordinator_address,
                    "JAX_NUM_PROCESSES": str(spec.gang_size)})
    return env


def own_environment(spec: JobSpec, task_index: int, attempt_id: str, *,
                    coordinator_address: str | None = None,
                    gang_hosts: Sequence[str] = ()) -> dict[str, str]:
    """The variables of one task and attempt: its index, attempt, and place in its gang."""
    if not 0 <= task_index < spec.num_tasks:
        raise ValueError(f"task index {task_index} out of range for {spec.num_tasks} tasks")
    env = {"IRIS_TASK_INDEX": str(task_index), "IRIS_ATTEMPT_ID": attempt_id}
    gang = spec.gang_size
    if gang > 1:
        if not coordinator_address:
            raise ValueError(f"job {spec.name}: a gang of {gang} needs a coordinator address")
        position = task_index % gang
        env["JAX_PROCESS_ID"] = str(position)
        hosts = [gang_hosts[i] if i < len(gang_hosts) else "127.0.0.1" for i in range(gang)]
        if spec.resources.tpu:
            env.update(_tpu_slice_env(spec, position, hosts, coordinator_address))
        elif spec.resources.gpu:
            env.update(_torch_env(position, gang, coordinator_address))
    return env


def _second_port(coordinator_address: str) -> tuple[str, int]:
    """The leader's host and the port after the JAX coordinator's: the gang's second
    service (megascale, or torch's TCPStore) must not collide with the first."""
    host, _, port = coordinator_address.rpartition(":")
    return host, int(port) + 1


def _tpu_slice_env(spec: JobSpec, position: int, hosts: list[str],
                   coordinator_address: str) -> dict[str, str]:
    slices = spec.resources.count
    per_slice = len(hosts) // slices
    slice_id, worker_id = divmod(position, per_slice)
    env = {
        "TPU_WORKER_ID": str(worker_id),
        "TPU_WORKER_HOSTNAMES": ",".join(hosts[slice_id * per_slice:(slice_id + 1) * per_slice]),
    }
    if slices > 1:
        host, port = _second_port(coordinator_address)
        env.update({
            "MEGASCALE_COORDINATOR_ADDRESS": f"{host}:{port}",
            "MEGASCALE_NUM_SLICES": str(slices),
            "MEGASCALE_SLICE_ID": str(slice_id),
            "MEGASCALE_PORT": str(port),
        })
    return env


def _torch_env(position: int, gang: int, coordinator_address: str) -> dict[str, str]:
    host, port = _second_port(coordinator_address)
    return {
        "MASTER_ADDR": host, "MASTER_PORT": str(port),
        "WORLD_SIZE": str(gang), "RANK": str(position),
        "NODE_RANK": str(position), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
    }


def gang_leader(spec: JobSpec, task_index: int) -> int:
    """Index of the first task of `task_index`'s gang (it hosts the JAX coordinator)."""
    return task_index - task_index % spec.gang_size
