"""Ray's task and actor options as Iris's: resources, runtime_env, retries. Pure.

Not the verbs (ray.py). An option with no Iris meaning is refused (RefusedError) naming it
and what to use instead, when the function or class is decorated, not when it runs.
"""

from __future__ import annotations

import re

from iris.base import errors as _errors
from iris.base.resources import Resources, tpu_shape

__all__ = ["ACTOR_OPTIONS", "FOREVER", "RefusedError", "check_known", "check_name",
           "check_strategy", "init_env", "job_name", "label_of", "resources_of",
           "runtime_env", "task_submit_options"]


class RefusedError(_errors.InvalidRequestError):
    """A Ray feature the Ray-shaped layer does not map; the message says what to use."""


class _ProcessWide:
    """One value for the whole process (every thread), as Ray's ray.init() state is."""

    def __init__(self) -> None:
        self._value: dict | None = None

    def get(self) -> dict | None:
        return self._value

    def set(self, value: dict | None) -> None:
        self._value = value


# `ray.init(runtime_env=...)`: the job-level runtime_env every remote function and actor
# started from this process gets (their own options override it), as Ray applies it, from
# any thread (a ContextVar would lose it in threads started before or by a pool).
init_env = _ProcessWide()

TASK_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "name",
                 "max_retries", "retry_exceptions", "runtime_env", "num_returns",
                 "scheduling_strategy", "max_calls"}
ACTOR_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "name",
                  "namespace", "lifetime", "max_restarts", "max_concurrency", "runtime_env",
                  "get_if_exists", "max_task_retries", "scheduling_strategy"}


def check_known(options: dict, known: set[str], what: str) -> None:
    unknown = sorted(set(options) - known)
    if unknown:
        raise RefusedError(f"{what}.options({unknown[0]}=...): not mapped by iris.compat.ray "
                           f"(mapped: {', '.join(sorted(known))})", unknown[0])


def _bad(option: str, expected: str, value: object) -> _errors.InvalidRequestError:
    return _errors.InvalidRequestError(f"{option}: expected {expected}, got {value!r}; "
                                       "nothing was submitted", option)


def _number(options: dict, option: str) -> None:
    value = options.get(option)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or value < 0):
        raise _bad(option, "a number >= 0", value)


def _custom_resources(options: dict) -> dict:
    custom = options.get("resources")
    if custom is None:
        return {}
    if not isinstance(custom, dict) or not all(isinstance(k, str) for k in custom):
        raise _bad("resources", "a dict of resource names to amounts, e.g. {'TPU': 4}", custom)
    for name in ("CPU", "GPU", "memory"):
        if name in custom:
            use = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}[name]
            raise RefusedError(f"resources={{{name!r}: ...}}: use the {use}= option instead "
                               "(as Ray requires too)", "resources")
    return dict(custom)


def resources_of(options: dict, default_cpu: float = 1) -> Resources:
    """Ray's resource options as iris.Resources, or RefusedError naming what has no match.
    An actor without num_cpus holds no CPU while it runs, as on Ray (default_cpu=0)."""
    for option in ("num_cpus", "num_gpus"):
        _number(options, option)
    cpu = options.get("num_cpus", default_cpu)
    memory = options.get("memory") or 0
    gpus = options.get("num_gpus") or 0
    kind = options.get("accelerator_type")
    custom = _custom_resources(options)
    tpu_chips = custom.pop("TPU", 0)
    if custom:
        name = sorted(custom)[0]
        raise RefusedError(f"resources={{{name!r}: ...}}: Iris has no custom resources; "
                           "select hosts by their attributes with iris.submit(constraints="
                           "{...}) instead", "resources")
    if gpus:
        if not kind:
            raise RefusedError(f"num_gpus={gpus}: Iris schedules GPUs by type; add "
                               "accelerator_type='H100' (or A100, L4, ...) to the options",
                               "num_gpus")
        if gpus != int(gpus):
            raise RefusedError(f"num_gpus={gpus}: Iris gives whole GPUs", "num_gpus")
        return Resources(cpu=cpu, memory=memory, gpu=kind, count=int(gpus))
    if tpu_chips:
        if not (kind or "").startswith("TPU-"):
            raise RefusedError(f"resources={{'TPU': {tpu_chips}}}: say which TPU with "
                               "accelerator_type='TPU-V5LITEPOD' (or TPU-V4, TPU-V5P, "
                               "TPU-V6E)", "resources")
        family = kind[4:].lower()
        per_name = 2 if family in ("v4", "v5p") else 1
        return Resources(cpu=cpu, memory=memory,
                         tpu=tpu_shape(f"{family}-{int(tpu_chips) * per_name}").name)
    return Resources(cpu=cpu, memory=memory)


def runtime_env(options: dict) -> dict:
    """A runtime_env (ray.init's, then the options', env_vars merged as Ray merges them) as
    iris.submit's env= and pip=; RefusedError for a field that does not map."""
    outer, inner = init_env.get() or {}, options.get("runtime_env") or {}
    for env in (outer, inner):
        if not isinstance(env, dict):
            raise _bad("runtime_env", "a dict, e.g. {'env_vars': {...}, 'pip': [...]}", env)
    env = {**outer, **inner}
    if "env_vars" in outer and "env_vars" in inner:
        env["env_vars"] = {**outer["env_vars"], **inner["env_vars"]}
    out: dict = {}
    if "env_vars" in env:
        out["env"] = _env_vars(env.pop("env_vars"))
    if "pip" in env:
        out["pip"] = _pip(env.pop("pip"))
    if env:
        raise RefusedError(f"runtime_env={{{sorted(env)[0]!r}: ...}}: only env_vars and pip "
                           "map (a job's env= and pip=); ship files with iris.submit("
                           "workspace=DIR)", "runtime_env")
    return out


def _env_vars(env_vars: object) -> dict:
    if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()):
        raise _bad("runtime_env['env_vars']", "a dict of str to str (as Ray requires)",
                   env_vars)
    return dict(env_vars)


def _pip(pip: object) -> list:
    """Ray's pip field: a list of requirements, or {"packages": [...], ...}."""
    if isinstance(pip, dict) and "packages" in pip:
        pip = pip["packages"]
    if isinstance(pip, str):
        raise RefusedError(f"runtime_env['pip']={pip!r}: a requirements file does not map; "
                           "list the requirements (pip=['numpy>=1.26', ...])", "runtime_env")
    if not isinstance(pip, list | tuple) or not all(isinstance(p, str) for p in pip):
        raise _bad("runtime_env['pip']", "a list of requirement strings, e.g. ['numpy']", pip)
    return list(pip)


# Ray's max_retries=-1 (retry forever), as a count no task reaches.
FOREVER = 1_000_000


def check_name(options: dict) -> None:
    name = options.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise _bad("name", "a non-empty string", name)


def _retries(options: dict) -> tuple[int | None, int]:
    """(max_retries_preemption, max_retries_failure) from max_retries and retry_exceptions."""
    retries = options.get("max_retries", 3)
    if retries is None:
        return None, 0
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < -1:
        raise _bad("max_retries", "an int >= 0, or -1 to retry forever", retries)
    retry_exceptions = options.get("retry_exceptions", False)
    if not isinstance(retry_exceptions, bool):
        raise RefusedError(f"retry_exceptions={retry_exceptions!r}: Iris retries a task that "
                           "raises on any exception, not on chosen types; use "
                           "retry_exceptions=True (or catch and re-raise in the task)",
                           "retry_exceptions")
    retries = FOREVER if retries == -1 else retries
    return retries, retries if retry_exceptions else 0


def label_of(fn: object) -> str:
    """What a remote function is called: its name, a partial's function's, or its type's."""
    target = getattr(fn, "func", fn)  # functools.partial
    return getattr(target, "__name__", None) or type(target).__name__


def job_name(fn: object, name: str | None, suffix: str) -> str:
    """A valid Iris job name for one call: Ray's `name=` (any text, a label on Ray) or the
    function's name, as letters, digits, '-', '_' and '.', then `-suffix`."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name or label_of(fn)).strip("-_.") or "task"
    return f"{base[:50].rstrip('-_.')}-{suffix}"


def check_strategy(options: dict) -> None:
    """Ray's placement (placement groups, node affinity) is refused; its defaults map."""
    if options.get("scheduling_strategy") not in (None, "DEFAULT", "SPREAD"):
        raise RefusedError("scheduling_strategy: Iris places tasks itself; use "
                           "iris.submit(constraints=...) or colocate=", "scheduling_strategy")


def task_submit_options(options: dict) -> dict:
    check_known(options, TASK_OPTIONS, "remote function")
    check_name(options)
    if options.get("num_returns", 1) != 1:
        raise RefusedError("num_returns != 1: return a tuple and unpack it after ray.get",
                           "num_returns")
    check_strategy(options)
    preemption, failure = _retries(options)
    return {"resources": resources_of(options), "name": options.get("name"),
            "max_retries_preemption": preemption, "max_retries_failure": failure}
