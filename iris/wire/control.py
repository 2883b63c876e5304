"""The control plane's messages: every call between controller, workers and regions, typed.

Not the envelope (messages.py) nor the decisions (controller, worker). Each message is a
frozen dataclass; `decode(Cls, raw)` checks a peer's plain data completely (types, bounds,
missing and unknown fields) before anything acts on it, and names the first wrong field, so a
refused message changes no state anywhere. `encode(msg)` gives the plain data to send.

    worker -> controller   WorkerRegistration (register_worker), WorkerReport (report),
                           PreemptionNotice (preemption_notice); UsageSample and UsageTotals
                           ride in reports and attempt updates
    controller -> worker   ReportAnswer (the answer to report)
    client -> inspector    TaskRef (stack, url), ProfileRequest, ExecRequest, ExecPoll
    inspector -> worker    ProfileRequest, ExecStart, ExecPoll (the worker's inspector)
    controller -> worker   Launch (start_attempt), StopRequest (stop_attempt)
    client -> controller   Submission (submit, dry_run)
    controller -> region   RegionSync (sync), RegionDelta (sync_delta)
    region -> controller   DrainHosts, UndrainHosts, HostsGone

The method names and positional arguments on the wire are those of docs/protocol.md; the
shells build these messages from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from iris.base.errors import InvalidRequestError
from iris.wire.schema import decode, encode, limits

__all__ = [
    "AttemptUpdate", "DrainHosts", "Entrypoint", "HostsGone", "InventorySlice", "Launch",
    "PreemptionNotice", "RegionDelta", "RegionSync", "ReportAnswer", "StopRequest",
    "Submission", "UndrainHosts", "WorkerRegistration", "WorkerReport",
    "arguments", "decode", "encode",
]
__all__ += ["MAX_PROFILE_S", "ExecPoll", "ExecRequest", "ExecStart", "ProfileRequest",
            "TaskRef", "UsageSample", "UsageTotals"]

# Ids (workers, attempts, jobs, hosts, slices) are short: 256 characters is far above any the
# system makes, and bounds what a hostile peer can make the controller keep per entry.
_ID = limits(max_len=256, non_empty=True)
# One worker runs at most a few hundred attempts; 4,096 leaves room and bounds a report.
_ATTEMPTS = limits(max_items=4096, max_len=256, non_empty=True)
# Attribute maps: a few dozen keys in practice.
_ATTRS = limits(max_items=256, max_len=4096)


# Port names a task asks for (Resources.ports): IRIS_PORT_<NAME> in its environment.
_PORTS = limits(max_items=16, min_value=1, max_value=65535)


@dataclass(frozen=True)
class UsageSample:
    """One reading of a running attempt's use (worker/usage_sampler.py): `cpu_s` is the
    CPU seconds its processes used since it started (grows), the rest are levels now.
    `memory_bytes` is what its memory cgroup is charged (page cache included; None without
    a cgroup); `disk_bytes` its work directory's size (None: not measured this time)."""

    attempt_id: str = field(metadata=_ID)
    at: float = field(metadata=limits(min_value=0.0))  # wall-clock epoch seconds
    cpu_s: float = field(metadata=limits(min_value=0.0))
    rss_bytes: int = field(metadata=limits(min_value=0))
    memory_bytes: int | None = field(default=None, metadata=limits(min_value=0))
    disk_bytes: int | None = field(default=None, metadata=limits(min_value=0))
    accel_busy: float | None = field(default=None, metadata=limits(min_value=0.0,
                                                                    max_value=1.0))


@dataclass(frozen=True)
class UsageTotals:
    """What one attempt used over its whole run, sent with its end ("exited", "preempted").
    `cpu_s` counts its reaped children too (the exit's rusage); `peak_rss_bytes` is the
    largest resident set seen (samples, and the kernel's own high-water mark at exit);
    `peak_memory_bytes` the cgroup's high-water mark (what a memory limit counts)."""

    cpu_s: float = field(metadata=limits(min_value=0.0))
    peak_rss_bytes: int = field(metadata=limits(min_value=0))
    peak_memory_bytes: int | None = field(default=None, metadata=limits(min_value=0))
    disk_bytes: int | None = field(default=None, metadata=limits(min_value=0))
    accel_busy: float | None = field(default=None, metadata=limits(min_value=0.0,
                                                                    max_value=1.0))
    oom_killed: bool = False  # the kernel's OOM killer ended it in its memory cgroup


@dataclass(frozen=True)
class AttemptUpdate:
    """A change in one attempt, as its worker saw it. Acknowledged by `attempt_id`."""

    attempt_id: str = field(metadata=_ID)
    # "preempted": stopped by fencing (its worker's lease lapsed), not by its own failure
    status: Literal["building", "running", "exited", "preempted"]
    exit_code: int | None = field(default=None, metadata=limits(min_value=-(1 << 31),
                                                                   max_value=1 << 31))
    error: str = ""
    # The task's pickled return value (exited with code 0), kept as the job's result.
    result: bytes | None = None
    # With "running": the ports the worker gave its named ports (Resources.ports).
    ports: dict[str, int] | None = field(default=None, metadata=_PORTS)
    # With "exited" or "preempted": what the attempt used over its run.
    usage: UsageTotals | None = None


@dataclass(frozen=True)
class WorkerRegistration:
    """A worker (re)joins: who, where, what it offers, what it runs, what is unacknowledged."""

    worker_id: str = field(metadata=_ID)
    address: str = field(metadata=limits(max_len=512, non_empty=True))
    attributes: dict[str, str] = field(metadata=_ATTRS)
    running: tuple[str, ...] = field(metadata=_ATTEMPTS)
    updates: tuple[AttemptUpdate, ...] = field(default=(), metadata=limits(max_items=4096))


@dataclass(frozen=True)
class WorkerReport:
    """The worker's heartbeat: updates since the last acknowledgement, its figures for
    /metrics (e.g. {"log_shipping": {...}}), and the attempts it runs now."""

    worker_id: str = field(metadata=_ID)
    updates: tuple[AttemptUpdate, ...] = field(metadata=limits(max_items=4096))
    stats: dict[str, Any] | None = field(default=None, metadata=limits(max_items=64))
    running: tuple[str, ...] | None = field(default=None, metadata=_ATTEMPTS)
    # Readings of running attempts since the last report (at most one per attempt).
    usage: tuple[UsageSample, ...] = field(default=(), metadata=limits(max_items=4096))


@dataclass(frozen=True)
class ReportAnswer:
    """The controller's answer to a report: the attempt updates it applied, whether the
    worker must register again (the controller does not know it), and the seconds until the
    next report (None from a controller from before intervals: the worker's own)."""

    acked: tuple[str, ...] = field(default=(), metadata=_ATTEMPTS)
    reregister: bool = False
    interval_s: float | None = field(default=None, metadata=limits(min_value=0.0,
                                                                   max_value=3600.0))
    # Where to report next, from a controller with report fronts (controller/report_fronts.py):
    # a front's address, or "" for the controller itself; None (a front's own answer, or a
    # controller without fronts): where this report went.
    reports_to: str | None = field(default=None, metadata=limits(max_len=512))


@dataclass(frozen=True)
class PreemptionNotice:
    """The cloud announced it will take this worker's machine (GCE gives 30 s): requeue its
    work now, place nothing more on it; its attempts get `time_left_s` to checkpoint."""

    worker_id: str = field(metadata=_ID)
    address: str = field(metadata=limits(max_len=512, non_empty=True))
    reason: str = field(metadata=limits(max_len=4096, non_empty=True))
    # GCE's longest notice is 60 s (maintenance); an hour bounds a nonsense value.
    time_left_s: float = field(metadata=limits(min_value=0.0, max_value=3600.0))


@dataclass(frozen=True)
class Entrypoint:
    """What a task runs: a cloudpickled callable (`payload`) or a command line (`argv`)."""

    kind: Literal["callable", "command"]
    payload: bytes | None = None
    argv: tuple[str, ...] = field(default=(), metadata=limits(max_items=4096))


@dataclass(frozen=True)
class Launch:
    """Start one attempt (idempotent by attempt id)."""

    attempt_id: str = field(metadata=_ID)
    job_id: str = field(metadata=limits(max_len=1024, non_empty=True))
    task_index: int = field(metadata=limits(min_value=0))
    attempt_number: int = field(metadata=limits(min_value=0))
    entrypoint: Entrypoint
    env: dict[str, str] = field(metadata=limits(max_items=1024))
    pip: tuple[str, ...] = field(default=(), metadata=limits(max_items=1024, max_len=4096))
    resources: dict[str, Any] = field(default_factory=dict, metadata=limits(max_items=32))
    bundle: str | None = field(default=None, metadata=limits(max_len=256))
    log_store: dict[str, Any] = field(default_factory=dict, metadata=limits(max_items=32))


@dataclass(frozen=True)
class Submission:
    """A job to run (submit, dry_run), as the client asks for it: what, on what, how many,
    and its policies. Only the types and sizes are checked here; the controller's
    `jobs/spec.py` checks the rest (names, parent, values, capacity) into a JobSpec. A
    field left None takes the controller's default (or the parent job's); the sender
    omits it from the wire (`encode(..., sparse=True)`), as clients always have."""

    name: str = field(metadata=limits(max_len=1024))
    entrypoint: Entrypoint
    user: str | None = field(default=None, metadata=limits(max_len=256))
    # Resources.to_dict(): cpu, memory, disk, tpu, gpu, count, hosts, ports
    resources: dict[str, Any] | None = field(default=None, metadata=limits(max_items=32))
    replicas: int | None = None
    priority: str | None = field(default=None, metadata=limits(max_len=64))
    env: dict[str, str] | None = field(default=None, metadata=limits(max_items=1024))
    pip: tuple[str, ...] | None = field(default=None, metadata=limits(max_items=1024,
                                                                      max_len=4096))
    constraints: dict[str, Any] | None = field(default=None, metadata=limits(max_items=256))
    max_retries_failure: int | None = None
    max_retries_preemption: int | None = None
    max_task_failures: int | None = None
    timeout_s: float | None = None
    scheduling_timeout_s: float | None = None
    parent: str | None = field(default=None, metadata=limits(max_len=1024))
    request_id: str | None = field(default=None, metadata=limits(max_len=1024))
    bundle: str | None = field(default=None, metadata=limits(max_len=256))
    existing_capacity_only: bool = False
    colocate: str | None = field(default=None, metadata=limits(max_len=64))
    colocate_with: str | None = field(default=None, metadata=limits(max_len=1024))
    checkpoint_every_s: float | None = None


@dataclass(frozen=True)
class StopRequest:
    """Stop one attempt: SIGTERM, `grace_s` (None: the worker's own grace), then SIGKILL."""

    attempt_id: str = field(metadata=_ID)
    grace_s: float | None = field(default=None, metadata=limits(min_value=0.0,
                                                                max_value=3600.0))
    reason: str = field(default="stopped", metadata=limits(max_len=4096))


@dataclass(frozen=True)
class InventorySlice:
    """One slice of a region's inventory as the controller pushes it (not a provider's
    SliceInfo: this is what the region's ledger holds of it)."""

    slice_id: str = field(metadata=_ID)
    hosts: tuple[str, ...] = field(metadata=limits(max_items=4096, max_len=256,
                                                   non_empty=True))
    accelerator: str | None = None
    attributes: dict[str, str] = field(default_factory=dict, metadata=_ATTRS)


@dataclass(frozen=True)
class RegionSync:
    """A region's whole inventory, the autoscaler's demand, and which drains are done."""

    slices: tuple[InventorySlice, ...] = field(metadata=limits(max_items=100_000))
    busy: tuple[str, ...] = field(metadata=limits(max_items=1_000_000, max_len=256))
    unmet: dict[str, int] = field(default_factory=dict, metadata=limits(min_value=0))
    drained: tuple[str, ...] = field(default=(), metadata=limits(max_items=1_000_000,
                                                                  max_len=256))
    # The push this is (RegionDelta): deltas that follow it apply on top. None: a sync from
    # someone who sends no deltas; any delta is then refused until a numbered sync.
    incarnation: str | None = field(default=None, metadata=_ID)
    seq: int | None = field(default=None, metadata=limits(min_value=1))


# A delta names what changed since the last push: a few hosts a turn in steady state, a
# region's worth after a mass registration; the same bounds as a whole sync.
_HOSTS = limits(max_items=1_000_000, max_len=256, non_empty=True)


@dataclass(frozen=True)
class RegionDelta:
    """What changed in a region's inventory since push `seq - 1` of controller
    `incarnation`; applied only right after that push (else refused: send a RegionSync)."""

    incarnation: str = field(metadata=_ID)
    seq: int = field(metadata=limits(min_value=1))
    slices: tuple[InventorySlice, ...] = field(default=(), metadata=limits(max_items=100_000))
    removed: tuple[str, ...] = field(default=(), metadata=limits(max_items=100_000,
                                                                  max_len=256, non_empty=True))
    busy: tuple[str, ...] = field(default=(), metadata=_HOSTS)
    free: tuple[str, ...] = field(default=(), metadata=_HOSTS)
    unmet: dict[str, int] | None = field(default=None, metadata=limits(min_value=0))
    drained: tuple[str, ...] = field(default=(), metadata=_HOSTS)
    undrained: tuple[str, ...] = field(default=(), metadata=_HOSTS)


@dataclass(frozen=True)
class DrainHosts:
    """A region will delete these hosts' idle slice: host id -> slice id."""

    hosts: dict[str, str] = field(metadata=limits(max_items=100_000, max_len=256))


@dataclass(frozen=True)
class UndrainHosts:
    hosts: tuple[str, ...] = field(metadata=limits(max_items=100_000, max_len=256))


@dataclass(frozen=True)
class HostsGone:
    """Hosts of slices a region deleted: host id -> why."""

    gone: dict[str, str] = field(metadata=limits(max_items=100_000, max_len=4096))


def arguments(cls: type, names: tuple[str, ...], args: tuple) -> Any:
    """A message from a call's positional arguments (the wire's calling convention)."""
    if len(args) > len(names):
        raise InvalidRequestError(f"{cls.__name__}: at most {len(names)} arguments "
                                  f"({', '.join(names)}), got {len(args)}")
    return decode(cls, dict(zip(names, args, strict=False)))



# ------------------------------------------------------------ looking inside a task (issue 31)

# A profile samples a live process; longer than 10 minutes is a mistake (a typo of units),
# and the calls that carry it must outlive it.
MAX_PROFILE_S = 600.0
_JOB = limits(max_len=1024, non_empty=True)
_ARGV = limits(max_items=4096, max_len=65536)  # an empty argv is refused where it is used


@dataclass(frozen=True)
class TaskRef:
    """One task of a job: `iris task stack JOB/TASK`, `iris job url JOB PORT --task N`."""

    job_id: str = field(metadata=_JOB)
    task_index: int = field(default=0, metadata=limits(min_value=0, max_value=1 << 20))


@dataclass(frozen=True)
class ProfileRequest:
    """A sampling profile of a live task for `seconds`, at `rate` samples a second.
    To a worker's inspector, `job_id` is the attempt's id."""

    job_id: str = field(metadata=_JOB)
    task_index: int = field(default=0, metadata=limits(min_value=0, max_value=1 << 20))
    seconds: float = field(default=10.0, metadata=limits(min_value=0.1,
                                                         max_value=MAX_PROFILE_S))
    # py-spy's default; 1,000/s is its own upper bound for a sane overhead.
    rate: int = field(default=100, metadata=limits(min_value=1, max_value=1000))


@dataclass(frozen=True)
class ExecRequest:
    """Run `argv` in a task's environment on its host (`iris task exec`). `user` is who
    asks: the job's owner (operators use the admin method and may name anyone)."""

    job_id: str = field(metadata=_JOB)
    argv: tuple[str, ...] = field(metadata=_ARGV)
    user: str = field(metadata=limits(max_len=256, non_empty=True))
    task_index: int = field(default=0, metadata=limits(min_value=0, max_value=1 << 20))


@dataclass(frozen=True)
class ExecStart:
    """To the worker's inspector: start `argv` beside attempt `attempt_id` as `session`."""

    attempt_id: str = field(metadata=_ID)
    session: str = field(metadata=limits(max_len=64, non_empty=True))
    argv: tuple[str, ...] = field(metadata=_ARGV)


@dataclass(frozen=True)
class ExecPoll:
    """Output of an exec session after byte `cursor`, waiting up to `wait_s` for some."""

    session: str = field(metadata=limits(max_len=64, non_empty=True))
    cursor: int = field(default=0, metadata=limits(min_value=0))
    wait_s: float = field(default=1.0, metadata=limits(min_value=0.0, max_value=10.0))
