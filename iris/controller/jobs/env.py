"""What a task is told: the environment variables of one attempt. Pure; not how it is launched.

The job's own `env` comes first and Iris's variables override it, so a user cannot accidentally
point a task at the wrong controller or the wrong JAX process id.
"""

from __future__ import annotations

from iris.controller.jobs.spec import JobSpec


def task_environment(spec: JobSpec, task_index: int, attempt_id: str, *,
                     controller_address: str, coordinator_address: str | None = None,
                     ) -> dict[str, str]:
    """Variables for attempt `attempt_id` of task `task_index` of the job `spec`.

    For a multi-host gang, `coordinator_address` ("host:port" of the gang's first task) is
    required: every process of the gang must dial the same JAX coordinator.
    """
    if not 0 <= task_index < spec.num_tasks:
        raise ValueError(f"task index {task_index} out of range for {spec.num_tasks} tasks")
    env = dict(spec.env)
    env.update({
        "IRIS_ADDRESS": controller_address,
        "IRIS_JOB_ID": spec.name,
        "IRIS_TASK_INDEX": str(task_index),
        "IRIS_NUM_TASKS": str(spec.num_tasks),
        "IRIS_ATTEMPT_ID": attempt_id,
    })
    gang = spec.gang_size
    if gang > 1:
        if not coordinator_address:
            raise ValueError(f"job {spec.name}: a gang of {gang} needs a coordinator address")
        env.update({
            "JAX_COORDINATOR_ADDRESS": coordinator_address,
            "JAX_NUM_PROCESSES": str(gang),
            "JAX_PROCESS_ID": str(task_index % gang),
        })
    return env


def gang_leader(spec: JobSpec, task_index: int) -> int:
    """Index of the first task of `task_index`'s gang (it hosts the JAX coordinator)."""
    return task_index - task_index % spec.gang_size
