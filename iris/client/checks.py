"""Checking what a user hands the public API, before anything is sent. Not the controller's
own check of a submission (it checks again): this one names the Python argument and shows
what was expected, so a mistake reads as one (`iris.submit("echo hello")` once ran `e`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle

from iris.base.errors import InvalidRequestError
from iris.base.resources import Resources
from iris.wire.states import PRIORITIES


def _fail(arg: str, expected: str, got: Any) -> InvalidRequestError:
    shown = repr(got)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InvalidRequestError(f"{arg}: expected {expected}, got {type(got).__name__} {shown}",
                               arg)


def entry(value: Any) -> None:
    if callable(value):
        return
    if isinstance(value, str | bytes):
        raise InvalidRequestError(
            f"entry: a command is a list of arguments, e.g. {value.split()!r} (or "
            f"shlex.split({value!r}) for shell-like quoting); got the string {value!r}",
            "entry")
    if not isinstance(value, Sequence) or not value or not all(
            isinstance(a, str) for a in value):
        raise _fail("entry", "a callable or a non-empty list of strings (a command)", value)
    for i, arg in enumerate(value):  # no process can be started with one
        if "\0" in arg:
            raise InvalidRequestError(f"entry[{i}]: contains a NUL byte: {arg!r}; nothing was "
                                      "submitted", "entry")


def submit_options(*, name: Any, resources: Any, replicas: Any, priority: Any, env: Any,
                   pip: Any, constraints: Any, retries: Mapping[str, Any],
                   timeouts: Mapping[str, Any], request_id: Any) -> None:
    """Every keyword of iris.submit, by its own name."""
    if name is not None and (not isinstance(name, str) or not name):
        raise _fail("name", "a non-empty string", name)
    if resources is not None and not isinstance(resources, Resources):
        raise _fail("resources", "iris.Resources(...), e.g. iris.Resources(cpu=2, "
                    "memory='4GiB')", resources)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise _fail("replicas", "an int >= 1", replicas)
    if priority is not None and priority not in PRIORITIES:
        raise _fail("priority", f"one of {', '.join(PRIORITIES)}", priority)
    if env is not None and (not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise _fail("env", "a dict of strings to strings", env)
    if isinstance(pip, str) or not isinstance(pip, Sequence) or not all(
            isinstance(p, str) for p in pip):
        raise _fail("pip", "a list of requirement strings, e.g. ['numpy>=1.26']", pip)
    if constraints is not None and not isinstance(constraints, Mapping):
        raise _fail("constraints", "a dict, e.g. {'zone': 'us-east5-a'} or "
                    "{'zone': {'in': ['a', 'b']}}", constraints)
    for arg, value in retries.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise _fail(arg, "an int >= 0", value)
    for arg, value in timeouts.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not math.isfinite(value) or value <= 0):
            raise _fail(arg, "a finite number of seconds > 0", value)
    if request_id is not None and (not isinstance(request_id, str) or not request_id):
        raise _fail("request_id", "a non-empty string", request_id)


def invalid(arg: str, expected: str, got: Any) -> InvalidRequestError:
    """The error for argument `arg` of a public call (for checks made outside this module)."""
    return _fail(arg, expected, got)


def wait_s(value: Any, arg: str = "timeout") -> float | None:
    """A wait's timeout: None (no bound) or a finite number of seconds >= 0. A NaN or a
    string once failed as "cannot convert float NaN to integer" or "'<' not supported"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value) or value < 0:
        raise _fail(arg, "None or a finite number of seconds >= 0", value)
    return float(value)


def name(value: Any, arg: str = "name") -> str:
    if not isinstance(value, str) or not value:
        raise _fail(arg, "an actor name (a non-empty string, e.g. 'trainer')", value)
    return value


def actor_class(cls: Any, spec_of: Callable[[type], Any]) -> None:
    """iris.spawn's class must be an @iris.actor class: said now, not after a 30 s wait."""
    if not isinstance(cls, type):
        raise _fail("cls", "a class decorated with @iris.actor", cls)
    spec_of(cls)  # TypeError naming the class and the decorator


def check_picklable(values: dict[str, Any]) -> bytes:
    """One pickle of `values` (label -> value), or InvalidRequestError naming the first
    that cannot travel to a task. Called before anything is submitted."""
    try:
        return cloudpickle.dumps(values)
    except Exception:
        _name_unpicklable(values)
        raise


def check_args_picklable(fn: Any, args: tuple, kwargs: dict | None = None) -> bytes:
    """A pickle of (fn, args, kwargs), or the error naming `fn`, `args[i]` or `kwargs[k]`."""
    try:
        return cloudpickle.dumps((fn, args, kwargs or {}))
    except Exception:
        values: dict[str, Any] = {"fn": fn}
        values.update({f"args[{i}]": a for i, a in enumerate(args)})
        values.update({f"kwargs[{k!r}]": v for k, v in (kwargs or {}).items()})
        _name_unpicklable(values)
        raise


def _name_unpicklable(values: dict[str, Any]) -> None:
    for label, value in values.items():
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            raise InvalidRequestError(
                f"{label}: cannot be pickled to send to a task ({type(exc).__name__}: "
                f"{exc}); nothing was submitted", label) from exc
