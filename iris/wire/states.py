"""Job and task states, as every layer above reads them (client, dashboard, CLI, controller).

Not the transitions (controller/jobs/kernel.py). Values are the strings that travel in
status replies and are stored by the controller.
"""

from __future__ import annotations

import enum

__all__ = ["ACTIVE_ATTEMPT", "CLUSTER_MARK_ENV", "DB_NAME", "ENV_CACHE_ENV", "FAILED_TASK", "PRIORITIES", "TERMINAL_JOB",
           "TERMINAL_TASK", "JobState", "TaskState"]

PRIORITIES = ("production", "interactive", "batch")
"""Priority bands, highest first."""

# The controller's job database in its state directory. Readers (the dashboard) open it
# read-only and query the jobs, tasks and attempts tables, whose columns store.py documents.
DB_NAME = "jobs.sqlite3"

# Every process a cluster started by `iris cluster start` runs (its controller, the workers
# of its local slices, their watchdogs and tasks) carries this in its environment, set to
# the cluster's directory: `iris cluster stop` finds what is left by it, and so may an
# operator (`grep -l IRIS_CLUSTER_MARK= /proc/*/environ`). Workers pass it on to tasks.
CLUSTER_MARK_ENV = "IRIS_CLUSTER_MARK"

# Where a worker keeps its task environments when not given --env-cache (default: under its
# work dir); set for every worker of a machine, they share one cache and build each venv
# once. Launchers that pick a cache of their own (local_cluster, LocalProvider) let it win.
ENV_CACHE_ENV = "IRIS_ENV_CACHE"


class TaskState(enum.StrEnum):
    PENDING = "pending"              # waiting for a placement (first time or for a retry)
    ASSIGNED = "assigned"            # placed on a worker; the worker has not confirmed yet
    BUILDING = "building"            # the worker is preparing its environment
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"                # failure budget spent (or timed out with none left)
    KILLED = "killed"                # by a user, by a parent ending, or by the job failing
    WORKER_FAILED = "worker_failed"  # its machine was lost with no preemption budget left
    PREEMPTED = "preempted"          # preempted with no preemption budget left
    UNSCHEDULABLE = "unschedulable"  # waited longer than its scheduling timeout


class JobState(enum.StrEnum):
    PENDING = "pending"
    BUILDING = "building"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    WORKER_FAILED = "worker_failed"
    UNSCHEDULABLE = "unschedulable"


ACTIVE_ATTEMPT = frozenset({TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING})
"""States in which an attempt holds a worker's resources."""

TERMINAL_TASK = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED,
                           TaskState.WORKER_FAILED, TaskState.PREEMPTED,
                           TaskState.UNSCHEDULABLE})
FAILED_TASK = frozenset({TaskState.FAILED, TaskState.WORKER_FAILED, TaskState.PREEMPTED})
"""Terminal states that count against a job's max_task_failures."""

TERMINAL_JOB = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED,
                          JobState.WORKER_FAILED, JobState.UNSCHEDULABLE})
