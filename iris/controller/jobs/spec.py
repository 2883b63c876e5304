"""What a submitted job asks for (JobSpec) and the validation that turns a Submission into one.

Pure: no I/O, no clock, no kernel state. Everything that can be checked from the request alone
(plus the parent's spec and a capacity catalogue handed in) is checked here; what depends on the
current jobs (is the parent still running, is the name taken, was this request id seen) is the
kernel's job.

Task count: `replicas` counts *gangs*. A TPU job's gang is every host of its slices
(`Resources.gang_size`, one task per host), so a `v5litepod-16` job (4 hosts) with replicas=2
has 8 tasks: indices 0-3 form gang 0 and 4-7 gang 1; `count=2` (two slices) makes each gang 8.
A GPU job's gang is `Resources.hosts` tasks (1 unless asked); a CPU job has gang size 1, so
tasks == replicas. Each gang is one JAX program (JAX_NUM_PROCESSES = gang size).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from iris.base.errors import InvalidRequestError, UnschedulableError
from iris.base.ids import join_path, normalize_path, validate_component
from iris.base.requirements import normalize_requirement
from iris.base.resources import Resources
from iris.controller import colocate
from iris.controller.scheduling.constraints import parse_constraints
from iris.wire.control import Entrypoint, Submission  # one type each, sender to receiver
from iris.wire.schema import decode
from iris.wire.states import PRIORITIES

DEFAULT_PRIORITY = "interactive"
"""A job submitted by hand is usually someone waiting for it; batch work opts out."""

DEFAULT_MAX_RETRIES_FAILURE = 0
"""A non-zero exit is usually a bug that would fail again: fail fast unless asked."""

DEFAULT_MAX_RETRIES_PREEMPTION = 100
"""Preemption and machine loss are not the user's fault, and on a preemptible fleet a long job
is preempted many times (Iris uses 100 too); the budget only stops a pathological loop."""

MAX_REPLICAS = 10_000
"""More tasks than this in one job is almost certainly a typo (and would be 10k rows per job)."""

Fits = Callable[[Resources], "str | None"]
"""Capacity catalogue: returns None if some scale group can run a task of this shape, else why
not. Passed in by the controller, which knows the configured scale groups."""

@dataclass(frozen=True)
class JobSpec:
    """A validated submission. `name` is the absolute job path and doubles as the job id."""

    name: str
    entrypoint: Entrypoint
    user: str
    resources: Resources = field(default_factory=Resources)
    replicas: int = 1
    priority: str = DEFAULT_PRIORITY
    env: Mapping[str, str] = field(default_factory=dict)
    pip: tuple[str, ...] = ()
    constraints: Mapping[str, Any] = field(default_factory=dict)
    max_retries_failure: int = DEFAULT_MAX_RETRIES_FAILURE
    max_retries_preemption: int = DEFAULT_MAX_RETRIES_PREEMPTION
    max_task_failures: int = 0
    """Tasks that may end failed (budgets spent) before the whole job fails; 0 = any fails it."""
    timeout_s: float | None = None
    """Seconds an attempt may run (counted from RUNNING) before it is stopped as failed."""
    scheduling_timeout_s: float | None = None
    """Seconds a task may wait PENDING before the job becomes UNSCHEDULABLE; None = forever."""
    parent: str | None = None
    request_id: str | None = None
    bundle: str | None = None
    """sha256 of the workspace bundle the tasks run in (a sub-job inherits its parent's)."""
    existing_capacity_only: bool = False
    """Run only on hosts already up: never asks the autoscaler for more (it waits instead)."""
    colocate: Mapping[str, str] | None = None
    """{"scope": "zone"|"region", "job": id}: run where that job runs (controller/colocate.py)."""
    checkpoint_every_s: float | None = None
    """Seconds between the job's own checkpoints (None = unknown): an evicted attempt loses
    its work since its last one, so eviction takes the attempts that lose least."""

    @functools.cached_property  # frozen: read on every pass for every pending task
    def gang_size(self) -> int:
        return self.resources.gang_size

    @property
    def num_tasks(self) -> int:
        return self.replicas * self.resources.gang_size

    def to_dict(self) -> dict[str, Any]:
        """Plain data for storage; the callable payload is left out (it is stored as a blob)."""
        return {
            "name": self.name, "user": self.user,
            "entrypoint": {"kind": self.entrypoint.kind, "argv": list(self.entrypoint.argv)},
            "resources": self.resources.to_dict(), "replicas": self.replicas,
            "priority": self.priority, "env": dict(self.env), "pip": list(self.pip),
            "constraints": dict(self.constraints),
            "max_retries_failure": self.max_retries_failure,
            "max_retries_preemption": self.max_retries_preemption,
            "max_task_failures": self.max_task_failures, "timeout_s": self.timeout_s,
            "scheduling_timeout_s": self.scheduling_timeout_s, "parent": self.parent,
            "request_id": self.request_id, "bundle": self.bundle,
            "existing_capacity_only": self.existing_capacity_only,
            "colocate": dict(self.colocate) if self.colocate else None,
            "checkpoint_every_s": self.checkpoint_every_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], payload: bytes = b"") -> JobSpec:
        ep = data["entrypoint"]
        entry = Entrypoint(kind=ep["kind"], payload=payload, argv=tuple(ep.get("argv", ())))
        fields = {k: v for k, v in data.items() if k not in ("entrypoint", "resources")}
        fields["pip"] = tuple(fields.get("pip", ()))
        return cls(entrypoint=entry, resources=Resources.from_dict(data["resources"]), **fields)


def validate_submit(sub: Submission | Mapping[str, Any], *, parent: JobSpec | None = None,
                    fits: Fits | None = None) -> JobSpec:
    """A JobSpec from a submission, or InvalidRequestError naming the first bad field.

    `sub` is the client's control.Submission; plain data (what a peer sent) is decoded into
    one first, which checks the types. `parent` is the spec of the job named by `sub.parent`
    (None if it has none or is unknown); a child inherits its parent's user, environment,
    pip packages and priority (its own values win). `fits` is the capacity catalogue;
    without it only the shape is checked.
    """
    if not isinstance(sub, Submission):
        sub = decode_submission(sub)
    parent_name = _parent(sub.parent, parent)
    user = _user(sub.user, parent)
    resources = _resources(sub.resources)
    if fits is not None:
        _check_fits(resources, fits)
    inherited_env = dict(parent.env) if parent else {}
    return JobSpec(
        name=_name(sub.name, parent_name, user),
        entrypoint=_entrypoint(sub.entrypoint),
        user=user,
        resources=resources,
        replicas=_int(sub.replicas, "replicas", 1, lo=1, hi=MAX_REPLICAS),
        priority=_priority(sub.priority, parent),
        env={**inherited_env, **_env(sub.env)},
        pip=_pip(sub.pip, parent.pip if parent else ()),
        constraints=_constraints(sub.constraints),
        max_retries_failure=_int(sub.max_retries_failure, "max_retries_failure",
                                 DEFAULT_MAX_RETRIES_FAILURE),
        max_retries_preemption=_int(sub.max_retries_preemption, "max_retries_preemption",
                                    DEFAULT_MAX_RETRIES_PREEMPTION),
        max_task_failures=_int(sub.max_task_failures, "max_task_failures", 0),
        timeout_s=_seconds(sub.timeout_s, "timeout_s"),
        scheduling_timeout_s=_seconds(sub.scheduling_timeout_s, "scheduling_timeout_s"),
        parent=parent_name,
        request_id=_request_id(sub.request_id),
        bundle=_bundle(sub.bundle, parent.bundle if parent else None),
        existing_capacity_only=sub.existing_capacity_only,
        colocate=colocate.parse(sub.colocate, sub.colocate_with, user, parent_name),
        checkpoint_every_s=_seconds(sub.checkpoint_every_s, "checkpoint_every_s"),
    )


def decode_submission(raw: Any) -> Submission:
    """The control.Submission a peer sent (plain data), or InvalidRequestError naming the
    first field of the wrong type, missing or unknown."""
    if not isinstance(raw, Mapping):
        raise InvalidRequestError(f"a submission must be a mapping, got {type(raw).__name__}")
    return decode(Submission, dict(raw))


def _parent(name: str | None, parent: JobSpec | None) -> str | None:
    if name is None:
        return None
    try:
        name = normalize_path(name)
    except ValueError as exc:
        raise InvalidRequestError(f"parent: {exc}", "parent") from exc
    if parent is None or parent.name != name:
        raise InvalidRequestError(f"parent: no job named {name!r}", "parent")
    return name


def _user(user: Any, parent: JobSpec | None) -> str:
    if parent is not None:
        if user not in (None, parent.user):
            raise InvalidRequestError(f"user: a sub-job runs as its parent's user "
                                      f"{parent.user!r}, not {user!r}", "user")
        return parent.user
    if user is None:
        raise InvalidRequestError("user: a root job needs a user", "user")
    try:
        return validate_component(user, "user")
    except ValueError as exc:
        raise InvalidRequestError(f"user: {exc}", "user") from exc


def _name(name: Any, parent_name: str | None, user: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"name: expected a job name, got {name!r}", "name")
    base = parent_name or f"/{user}"
    try:
        path = join_path(base, name)
    except ValueError as exc:
        raise InvalidRequestError(f"name: {exc}", "name") from exc
    if not path.startswith(base + "/"):
        raise InvalidRequestError(f"name: {path!r} is not under {base!r}", "name")
    return path


def _entrypoint(ep: Entrypoint) -> Entrypoint:
    if ep.kind == "callable":
        if not ep.payload:
            raise InvalidRequestError("entrypoint: a callable needs pickled payload bytes",
                                      "entrypoint")
        return Entrypoint(kind="callable", payload=ep.payload)
    if not ep.argv:
        raise InvalidRequestError("entrypoint: argv must be a non-empty list of str, got []",
                                  "entrypoint")
    for i, arg in enumerate(ep.argv):  # no process can be started with one: refused now
        if "\0" in arg:
            raise InvalidRequestError(f"entrypoint: argv[{i}] contains a NUL byte: {arg!r}",
                                      "entrypoint")
    return Entrypoint(kind="command", payload=b"", argv=ep.argv)


def _resources(res: Any) -> Resources:
    if res is None:
        return Resources()
    if isinstance(res, Mapping):
        unknown = sorted(set(res) - {"cpu", "memory", "disk", "tpu", "gpu", "count",
                                      "hosts", "ports"})
        if unknown:
            raise InvalidRequestError(f"resources.{unknown[0]}: unknown field",
                                      f"resources.{unknown[0]}")
        res = Resources.from_dict(res)
    if isinstance(res, Resources):
        # Sizes as bytes, so a spec equals itself after a round trip through storage.
        return Resources.from_dict(res.to_dict())
    raise InvalidRequestError(f"resources: expected Resources or a mapping, got {res!r}",
                              "resources")


def _check_fits(resources: Resources, fits: Fits) -> None:
    """Some alternative must fit the catalogue; the others may wait for capacity to exist."""
    options = ([resources.choose(t) for t in resources.tpu_alternatives]
               if resources.has_fallbacks else [resources])
    reasons = [fits(r) for r in options]
    if all(reasons):
        said = "; ".join(f"{r.tpu}: {why}" for r, why in zip(options, reasons, strict=True)) \
            if len(options) > 1 else reasons[0]
        raise UnschedulableError(f"resources: {said}", "resources")


def _int(value: int | None, key: str, default: int, lo: int = 0,
         hi: int = 1_000_000) -> int:
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidRequestError(f"{key}: expected an int in [{lo}, {hi}], got {value!r}", key)
    return value


def _seconds(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidRequestError(f"{key}: expected seconds > 0, got {value!r}", key)
    return float(value)


def _priority(value: Any, parent: JobSpec | None) -> str:
    if value is None:
        return parent.priority if parent else DEFAULT_PRIORITY
    if value not in PRIORITIES:
        raise InvalidRequestError(
            f"priority: expected one of {', '.join(PRIORITIES)}, got {value!r}", "priority")
    return value


def _env(env: Any) -> dict[str, str]:
    env = _mapping(env, "env")
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise InvalidRequestError(f"env: invalid variable name {key!r}", "env")
        if not isinstance(value, str):
            raise InvalidRequestError(f"env: value of {key} must be a str, got {value!r}",
                                      "env")
        if "\0" in value:
            raise InvalidRequestError(f"env: value of {key} contains a NUL byte: {value!r}",
                                      "env")
    return env


def _pip(pip: Any, inherited: tuple[str, ...]) -> tuple[str, ...]:
    if pip is None:
        return inherited
    if not isinstance(pip, list | tuple) or not all(isinstance(p, str) and p for p in pip):
        raise InvalidRequestError(f"pip: expected a list of requirement strings, got {pip!r}",
                                  "pip")
    for requirement in pip:  # what no worker could build is refused now, not at its build
        normalize_requirement(requirement)
    return tuple(dict.fromkeys((*inherited, *pip)))


def _mapping(value: Any, key: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"{key}: expected a mapping, got {value!r}", key)
    return dict(value)


def _constraints(value: Any) -> dict[str, Any]:
    """Plain JSON data (the scheduler parses it); normalized so it reads back equal."""
    value = _mapping(value, "constraints")
    try:
        value = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"constraints: must be plain JSON data ({exc})",
                                  "constraints") from exc
    # Parsed here as well as by the scheduler, so a bad operator is refused at submit and
    # never reaches a scheduling pass (where it once failed every later pass).
    parse_constraints(value)
    return value


def _bundle(value: Any, inherited: str | None) -> str | None:
    if value is None:
        return inherited
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise InvalidRequestError(f"bundle: expected a sha256 hex digest, got {value!r}",
                                  "bundle")
    return value


def _request_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= 128:
        raise InvalidRequestError(f"request_id: expected 1-128 chars, got {value!r}",
                                  "request_id")
    return value
