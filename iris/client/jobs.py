"""Submitting jobs: `iris.submit` and `iris.spawn`.

Not the controller (it decides), nor following a job (job_handle.py: JobHandle, whose
names are re-exported here): this turns a Python call into a `control.Submission` and sends
it with a request id (so a retried submit returns the same job).
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import getpass
import os
import sys
import sysconfig
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cloudpickle

from iris.actors import ActorGroup, ActorRef, ClusterContext, current
from iris.actors.current import current_context
from iris.actors.hosting import spec_of
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import (
    ActorNotFoundError,
    ConfigError,
    IrisError,
    JobFailedError,
    PeerUnavailableError,
    StorageError,
)
from iris.base.resources import Resources
from iris.client import checks
from iris.client.job_handle import TERMINAL as TERMINAL  # re-exported: stable names
from iris.client.job_handle import JobHandle as JobHandle
from iris.client.retry import ask_controller as _controller
from iris.wire import control
from iris.wire.bundles import pack
from iris.wire.states import TERMINAL_JOB

# A submit that loses its connection is retried this many times with the same request id.
_SUBMIT_RETRIES = 3


FUNCTION_ENV = "IRIS_FUNCTION"
"""Every task of a callable job gets `module.qualname` of its function here; the dashboard
shows it as what the job runs (the function itself travels pickled, without a name)."""


def _qualified_name(fn: Any) -> str:
    fn = fn.func if isinstance(fn, functools.partial) else fn
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module and module != "__main__" else name


def ship_by_value(obj: Any) -> None:
    """Pickle the module defining `obj` by value when it is the user's own code.

    cloudpickle pickles functions of importable modules by reference, but a user's script
    or test module is not importable on the worker; installed packages (site-packages, the
    standard library) and Iris itself are, and stay by reference.
    """
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or module.__name__ == "__main__":
        return
    if module.__name__.split(".")[0] == "iris":
        return
    if not os.path.abspath(path).startswith(_installed_dirs()):
        cloudpickle.register_pickle_by_value(module)


@functools.cache
def _installed_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.abspath(paths[k]) + os.sep
                 for k in ("stdlib", "platstdlib", "purelib", "platlib"))


@functools.cache
def _user() -> str:
    return os.environ.get("IRIS_USER") or getpass.getuser()


def _upload_workspace(ctx: ClusterContext, root: Path) -> str:
    digest, data = pack(root)
    if not _controller(ctx, "has_bundle", digest):
        _controller(ctx, "put_bundle", digest, data, timeout_s=300.0)
    return digest


def context_or_local_cluster() -> ClusterContext:
    """The current cluster; inside a task, the task's; with none at all, a new local one
    (one worker), kept until the process exits, as DESIGN promises for iris.submit."""
    if current_context.get() is None and not os.environ.get("IRIS_ADDRESS"):
        from iris.client.cluster import local_cluster

        stack = contextlib.ExitStack()
        ctx = stack.enter_context(local_cluster(workers=1))
        atexit.register(stack.close)
        print(f"iris: no cluster given; started a local one at {ctx.address}", file=sys.stderr)
        return ctx
    return current()


def submit(entry: Callable | Sequence[str], *args: Any, name: str | None = None,
           resources: Resources | None = None, replicas: int = 1, priority: str | None = None,
           env: dict[str, str] | None = None, pip: Sequence[str] = (),
           constraints: dict | None = None, max_retries_failure: int | None = None,
           max_retries_preemption: int | None = None, max_task_failures: int | None = None,
           timeout: float | None = None, scheduling_timeout: float | None = None,
           request_id: str | None = None, workspace: str | os.PathLike | None = None,
           dry_run: bool = False, durable: bool = False,
           durable_timeout: float = 600.0,
           existing_capacity_only: bool = False, colocate: str | None = None,
           colocate_with: str | None = None,
           checkpoint_every: float | None = None) -> JobHandle | dict:
    """Run `entry(*args)` (a callable) or `entry` (a command list) as a job; its handle.

    `workspace`: a directory shipped (content-addressed, uploaded once) to run the tasks
    in; a `requirements.txt` in it is installed into the job's environment.
    `dry_run`: submit nothing; return whether it would fit now and where (a dict from the
    real scheduler over the live workers).
    `existing_capacity_only`: run only on hosts already up; wait for them rather than have
    the autoscaler add any (its pending reason says so).
    `colocate`: "zone" or "region": run in the same zone (region) as the parent job (the
    job whose task submits this one), or as `colocate_with` (a job id, or a name relative
    to the parent): a coordinator can follow its accelerator job; it waits until that job
    is placed.
    `checkpoint_every`: seconds between the job's own checkpoints, if it makes them; when
    higher-priority work must evict something, Iris then evicts what loses the least work
    since its last checkpoint.
    `durable`: return only once the submission is in a checkpoint in GCS, so it survives the
    loss of the controller's machine (seconds: one checkpoint, shared by concurrent callers;
    the controller must be configured with storage.snapshot_bucket). Without it a submission
    is on the controller's disk at once, and off the machine within the checkpoint interval.
    """
    checks.entry(entry)
    checks.submit_options(
        name=name, resources=resources, replicas=replicas, priority=priority, env=env, pip=pip,
        constraints=constraints, request_id=request_id,
        retries={"max_retries_failure": max_retries_failure,
                 "max_retries_preemption": max_retries_preemption,
                 "max_task_failures": max_task_failures},
        timeouts={"timeout": timeout, "scheduling_timeout": scheduling_timeout,
                  "durable_timeout": durable_timeout, "checkpoint_every": checkpoint_every})
    for flag, value in (("durable", durable), ("existing_capacity_only", existing_capacity_only)):
        if not isinstance(value, bool):
            raise checks.invalid(flag, "True or False", value)
    ctx = context_or_local_cluster()
    sub = build_submission(
        entry, args, name=name, resources=resources, replicas=replicas, priority=priority,
        env=env, pip=pip, constraints=constraints, max_retries_failure=max_retries_failure,
        max_retries_preemption=max_retries_preemption, max_task_failures=max_task_failures,
        timeout=timeout, scheduling_timeout=scheduling_timeout, request_id=request_id,
        bundle=_upload_workspace(ctx, Path(workspace)) if workspace is not None else None,
        existing_capacity_only=existing_capacity_only, colocate=colocate,
        colocate_with=colocate_with, checkpoint_every=checkpoint_every)
    if dry_run:
        return _controller(ctx, "dry_run", submission_wire(sub))
    wire = submission_wire(sub)
    answer = _send_submit(ctx, wire)
    if durable:
        _wait_durable(ctx, answer["job_id"], durable_timeout)
    return JobHandle(answer["job_id"], ctx, wire)


def build_submission(entry: Callable | Sequence[str], args: tuple, *, name: str | None = None,
                     resources: Resources | None = None, replicas: int = 1,
                     priority: str | None = None, env: dict[str, str] | None = None,
                     pip: Sequence[str] = (), constraints: dict | None = None,
                     max_retries_failure: int | None = None,
                     max_retries_preemption: int | None = None,
                     max_task_failures: int | None = None, timeout: float | None = None,
                     scheduling_timeout: float | None = None, request_id: str | None = None,
                     bundle: str | None = None, existing_capacity_only: bool = False,
                     colocate: str | None = None, colocate_with: str | None = None,
                     checkpoint_every: float | None = None) -> control.Submission:
    """The control.Submission `submit` sends, from its options (already checked); a sub-job
    (inside a task) names its parent from IRIS_JOB_ID."""
    entrypoint, env, default_name = _entrypoint(entry, args, env)
    request_id = request_id or uuid.uuid4().hex
    return control.Submission(
        # Derived from the request id, so resubmitting a request makes the same job again.
        name=name or f"{default_name}-{request_id[:6]}",
        entrypoint=entrypoint, replicas=replicas,
        resources=(resources or Resources()).to_dict(),
        env=dict(env or {}), pip=tuple(pip), constraints=dict(constraints or {}),
        user=_user(), request_id=request_id, bundle=bundle,
        priority=priority, max_retries_failure=max_retries_failure,
        max_retries_preemption=max_retries_preemption, max_task_failures=max_task_failures,
        timeout_s=timeout, scheduling_timeout_s=scheduling_timeout,
        parent=os.environ.get("IRIS_JOB_ID"), existing_capacity_only=existing_capacity_only,
        colocate=colocate, colocate_with=colocate_with, checkpoint_every_s=checkpoint_every)


def submission_wire(sub: control.Submission) -> dict:
    """What goes on the wire for a submission: the fields a client set, under the keys
    every controller reads (those left None take the controller's default)."""
    return control.encode(sub, sparse=True)


def _entrypoint(entry: Any, args: tuple, env: dict | None
                ) -> tuple[control.Entrypoint, dict | None, str]:
    """(entrypoint, env, default name) of a callable with its arguments, or of a command."""
    if callable(entry):
        ship_by_value(entry.func if isinstance(entry, functools.partial) else entry)
        for arg in args:
            if isinstance(arg, type):
                ship_by_value(arg)
        name = getattr(entry, "__name__", "job").strip("<>").replace("_", "-").strip("-")
        payload = checks.check_args_picklable(entry, args)
        return (control.Entrypoint(kind="callable", payload=payload),
                {FUNCTION_ENV: _qualified_name(entry), **(env or {})}, name or "job")
    if args:
        raise TypeError("arguments go inside the command list, not after it")
    return (control.Entrypoint(kind="command", argv=tuple(entry)), env,
            os.path.basename(str(entry[0])) if entry else "job")


def _send_submit(ctx: ClusterContext, wire: dict) -> dict:
    """The controller's answer to a submission (`submission_wire`); it is idempotent by
    request id, so one whose answer was lost is sent again."""
    for attempt in range(_SUBMIT_RETRIES):
        try:
            return _controller(ctx, "submit", wire)
        except PeerUnavailableError:
            if attempt == _SUBMIT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _wait_durable(ctx: ClusterContext, job_id: str, timeout: float) -> None:
    try:
        _controller(ctx, "wait_durable", timeout, timeout_s=timeout + 30.0)
    except IrisError as exc:
        kind = ConfigError if isinstance(exc, ConfigError) else StorageError
        raise kind(f"job {job_id} was accepted, but is not yet durable off the controller's "
                   f"machine: {exc}") from exc


def spawn(cls: type, *args: Any, name: str, resources: Resources | None = None,
          replicas: int = 1, timeout: float = 120.0, **submit_options: Any
          ) -> ActorRef | ActorGroup:
    """Launch a job whose tasks serve `cls(*args)` as `name`; its ref (group if replicas > 1)."""
    return spawn_job(cls, *args, name=name, resources=resources, replicas=replicas,
                     timeout=timeout, **submit_options)[0]


def spawn_job(cls: type, *args: Any, name: str, resources: Resources | None = None,
              replicas: int = 1, timeout: float = 120.0, **submit_options: Any
              ) -> tuple[ActorRef | ActorGroup, JobHandle]:
    """As spawn, with the job serving the actor (to kill it, or watch it)."""
    checks.actor_class(cls, spec_of)
    checks.name(name)
    ctx = current()
    full = ctx.full_name(name)
    ship_by_value(cls)
    # A job name of its own each time: an actor is often spawned again under its name after
    # its job was killed, and a job of the same name would be a new job with old task ids.
    job_name = submit_options.pop("job_name", None) or \
        f"{name.strip('/').replace('/', '-')[:40]}-{uuid.uuid4().hex[:6]}"
    job = submit(functools.partial(_serve_forever, cls, full, args), name=job_name,
                 resources=resources, replicas=replicas, **submit_options)
    clock = SYSTEM_CLOCK
    deadline = clock.monotonic() + timeout
    while True:  # the name appears, or the task's own error comes back as soon as it fails
        # Only this job's actors: an earlier one of the same name may still be listed.
        group = ctx.resolve_all(full, timeout=min(1.0, max(deadline - clock.monotonic(), 0)),
                                job=job.job_id)
        if len(group) >= replicas:
            break
        state = job.status()["state"]
        if state in TERMINAL_JOB:
            job.result(timeout=0)  # raises the task's error (JobFailedError)
            raise JobFailedError(f"actor job {job.job_id} ended {state} before serving {full}",
                                 job.status())
        if clock.monotonic() >= deadline:
            if len(group):
                break
            raise ActorNotFoundError(f"{full}: not served within {timeout} s (job "
                                     f"{job.job_id} is {state}){_failures(job)}", actor=full)
    return (group if replicas > 1 else group[0]), job


def _failures(job: JobHandle) -> str:
    """Why the actor's attempts failed so far (its constructor raised, say: the job is
    pending a retry), so a spawn that times out says so; it said only "job is pending"."""
    seen = [f"task {t['index']}: {t['error']}" for t in job.status().get("tasks", [])
            if t.get("error")]
    return ("; its attempts failed:\n" + "\n".join(seen)) if seen else ""


def _serve_forever(cls: type, full_name: str, args: tuple) -> None:
    import threading

    from iris.base import signals
    from iris.client.cluster import connect
    from iris.worker.task_runtime import on_preempt  # as `iris.on_preempt` in any task

    ctx = connect()
    ctx.serve_spawned(cls, full_name, args)
    # Stopped (the job killed, its parent gone, the host preempted): the name leaves the
    # registry now, so a caller or a new actor of that name does not meet the old one for
    # the rest of its lease (registry.LEASE_S, 3 s). After the actor's own callbacks.
    on_preempt(ctx.close)
    signals.wait_for(threading.Event())  # in slices, so its SIGTERM handler runs (signals.py)
