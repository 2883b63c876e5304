"""What a worker is told to start an attempt: the start command's body. Pure.

Not the decision to start it (the kernel's StartAttempt) nor the sending (actor.py). Builds
the task's environment, including the JAX coordinates of a gang (its leader's host and a
port derived from the leader's attempt) and the actor namespace shared by a job tree.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import fields, replace

from iris.actors.holders import PROOF_ENV
from iris.controller.credentials import attempt_proof
from iris.controller.jobs import events as ev
from iris.controller.jobs.env import gang_leader, own_environment, shared_environment
from iris.controller.jobs.spec import JobSpec
from iris.controller.jobs.state import KernelState
from iris.controller.scheduler_view import attempt_resources
from iris.controller.workers import WorkerInfo
from iris.logstore.config import LogStoreConfig
from iris.wire import control

# After the Nth restore from a checkpoint, attempt numbers on the wire start at N times
# this. Workers fence a task's attempts by number (a newer one wins) and remember numbers
# they ran; a restored controller may have forgotten attempts started after its checkpoint,
# and numbering again from there would be refused ("already claimed") or stale. A million
# is far beyond any task's retry budget (preemption retries default to 100).
RESTORE_ATTEMPT_STRIDE = 1_000_000
_LOG_STORE_FIELDS = tuple(f.name for f in fields(LogStoreConfig))


def launch(state: KernelState, workers: Mapping[str, WorkerInfo], start: ev.StartAttempt,
           controller_address: str, log_store: LogStoreConfig,
           attempt_base: int = 0, gangs: dict | None = None) -> control.Launch:
    """`gangs`: a dict kept for the starts of one committed change (the state does not move
    between them), so that what a gang's tasks share (its hosts, its coordinator, the
    environment but for each task's own variables, resources, log store) is built once,
    not once per task: the message of each start then holds the same shared parts."""
    spec: JobSpec = state.jobs[start.job_id].spec
    attempt = state.attempts[start.attempt_id]
    parts = _shared(state, workers, spec, start, attempt.accelerator, controller_address,
                    log_store, gangs)
    coordinator, hosts, env, resources, log_fields = parts
    env = dict(env)
    env.update(own_environment(spec, start.task_index, start.attempt_id,
                               coordinator_address=coordinator, gang_hosts=hosts))
    return control.Launch(
        attempt_id=start.attempt_id, job_id=start.job_id, task_index=start.task_index,
        attempt_number=attempt_base + attempt.number,
        entrypoint=spec.entrypoint, env=env, pip=tuple(spec.pip), resources=resources,
        bundle=spec.bundle, log_store=log_fields)


def with_proof(message: control.Launch, secret: bytes) -> control.Launch:
    """The start with its attempt's proof ($IRIS_ATTEMPT_PROOF, holders.py): what the task
    shows the registry to register, renew and unregister its names. Added as the start is
    sent (Controller._command), where the controller's secret is."""
    proof = attempt_proof(secret, message.job_id, message.task_index, message.attempt_id)
    return replace(message, env={**message.env, PROOF_ENV: proof})


def _shared(state: KernelState, workers: Mapping[str, WorkerInfo], spec: JobSpec,
            start: ev.StartAttempt, accelerator: str | None, controller_address: str,
            log_store: LogStoreConfig, gangs: dict | None) -> tuple:
    """(coordinator, gang hosts, shared environment, resources, log store) of the start's
    gang (of its job, without gangs) on `accelerator`, from `gangs` if built already."""
    leader = gang_leader(spec, start.task_index) if spec.gang_size > 1 else None
    key = ("start", spec.name, leader, accelerator)
    parts = gangs.get(key) if gangs is not None else None
    if parts is None:
        coordinator = _coordinator(state, workers, spec, start)
        env = shared_environment(spec, controller_address=controller_address,
                                 coordinator_address=coordinator)
        env["IRIS_NAMESPACE"] = namespace(spec.name)
        resources = attempt_resources(spec, accelerator)
        if resources.accelerator:  # which fallback alternative it got (or its only type)
            env["IRIS_ACCELERATOR"] = resources.accelerator
        parts = (coordinator, _gang_hosts(state, workers, spec, start, gangs), env,
                 resources.to_dict(),
                 # Scalars only: dataclasses.asdict's deep copy cost 40 µs a start.
                 {name: getattr(log_store, name) for name in _LOG_STORE_FIELDS})
        if gangs is not None:
            gangs[key] = parts
    return parts


def _coordinator(state: KernelState, workers: Mapping[str, WorkerInfo], spec: JobSpec,
                 start: ev.StartAttempt) -> str | None:
    """host:port of the gang leader's worker, for JAX (a port derived from the attempt)."""
    if spec.gang_size <= 1:
        return None
    leader = state.tasks[(spec.name, gang_leader(spec, start.task_index))]
    host = _host_of(state, workers, spec.name, leader.index)
    port = 20000 + zlib.crc32((leader.attempt_id or spec.name).encode()) % 20000
    return f"{host}:{port}"


def _gang_hosts(state: KernelState, workers: Mapping[str, WorkerInfo], spec: JobSpec,
                start: ev.StartAttempt, gangs: dict | None = None) -> list[str]:
    """The host of each task of this task's gang, by position: a gang is assigned whole in
    one turn, so every task already names its worker when the first start is sent. With
    `gangs` (see launch), once per gang: per task it was O(gang size), O(size^2) a gang."""
    if spec.gang_size <= 1:
        return []
    first = gang_leader(spec, start.task_index)
    key = (spec.name, first)
    hosts = gangs.get(key) if gangs is not None else None
    if hosts is None:
        hosts = [_host_of(state, workers, spec.name, i)
                 for i in range(first, first + spec.gang_size)]
        if gangs is not None:
            gangs[key] = hosts
    return hosts


def _host_of(state: KernelState, workers: Mapping[str, WorkerInfo], job_id: str,
             index: int) -> str:
    task = state.tasks.get((job_id, index))
    attempt = state.attempts.get(task.attempt_id or "") if task else None
    worker = workers.get(attempt.worker_id if attempt else "")
    return worker.address.split("//")[-1].rsplit(":", 1)[0] if worker else "127.0.0.1"


def namespace(job_id: str) -> str:
    """Actors of a job tree share the root job's namespace: `/alice/rl/rollout` -> `/alice/rl`."""
    parts = job_id.strip("/").split("/")
    return "/" + "/".join(parts[:2]) if len(parts) >= 2 else job_id
