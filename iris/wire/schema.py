"""Checking plain wire data against a frozen dataclass, completely, before anyone acts on it.

Not the messages themselves (control.py). `decode(cls, raw, where)` takes the msgpack-level
value a peer sent (dicts, lists, str, int, float, bytes, None) and either returns an instance
of `cls` or raises InvalidRequestError naming the first wrong field by its path
(`updates[2].result: expected bytes or None, got dict`). Nothing is half-built: the caller
gets a whole, valid message or an error, so a refusal can never leave state changed.

Field types are read from the dataclass annotations; a field may add bounds through
`field(metadata=limits(...))`. Supported: str, int (never bool), float (finite, ints allowed),
bool, bytes, None unions, Literal[...], enums (by value), tuple[T, ...], frozenset[T] (a
list on the wire, sorted), dict[str, T], nested message classes.
Every string, sequence and map is bounded so one message cannot make the receiver hold an
unbounded amount of memory.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from typing import Any, Literal, get_args, get_origin

from iris.base.errors import InvalidRequestError

# Defaults for every field that does not say otherwise. Ids and names are short; 4,096 items
# covers a worker running thousands of attempts; 1 MiB strings cover error tails and argv.
MAX_STR = 1 << 20
MAX_ITEMS = 4096


def limits(*, max_len: int | None = None, max_items: int | None = None,
           min_value: float | None = None, max_value: float | None = None,
           non_empty: bool = False) -> dict:
    """Bounds for one field, to pass as `field(metadata=limits(...))`."""
    return {"max_len": max_len, "max_items": max_items, "min_value": min_value,
            "max_value": max_value, "non_empty": non_empty}


def decode(cls: type, raw: Any, where: Any = "") -> Any:
    """An instance of the dataclass `cls` from `raw` (a dict), or InvalidRequestError.
    `where`: the path of `raw` in its message, a string or a lazy path (_path)."""
    fields = _compiled(cls)
    if not isinstance(raw, dict):
        _fail(_path(where) or cls.__name__, f"expected a map of {cls.__name__} fields", raw)
    if len(raw) > len(fields) or not all(k in fields for k in raw):
        where = _path(where)
        unknown = sorted(str(k) for k in raw if k not in fields)[0]
        raise InvalidRequestError(
            f"{_join(where, unknown)}: unknown field (expected: {', '.join(fields)})",
            _join(where, unknown))
    values = {}
    for name, (required, check) in fields.items():
        if name in raw:
            # The path is built only if the value is refused: a report is decoded ~4,000
            # times a second at 10,000 hosts, and formatting every field's path was a
            # third of its decode.
            values[name] = check(raw[name], (where, name))
        elif required:
            path = _join(_path(where), name)
            raise InvalidRequestError(f"{path}: missing", path)
    return cls(**values)


def encode(message: Any, *, sparse: bool = False) -> dict:
    """The plain-data form of a message (the inverse of `decode`). `sparse` leaves out the
    fields (of nested messages too) that hold their default: the receiver fills them in."""
    fields = _FIELDS.get(type(message))
    if fields is None:  # once per class: dataclasses.fields() is costly on a hot path
        fields = _FIELDS[type(message)] = tuple((f.name, f.default)
                                                for f in dataclasses.fields(message))
    if not sparse:
        return {name: _plain(getattr(message, name)) for name, _ in fields}
    out = {}
    for name, default in fields:
        value = getattr(message, name)
        if default is not dataclasses.MISSING and value == default:
            continue
        out[name] = _plain(value, sparse)
    return out


# ---------------------------------------------------------------- internals

# Per message class, built once: field name -> (required, check(value, path) -> value). The
# type hints are read at the first decode, not per message (a report is decoded ~10,000
# times a second at 10,000 hosts).
_COMPILED: dict[type, dict] = {}
_FIELDS: dict[type, tuple[tuple[str, Any], ...]] = {}  # per message class: (name, default)


def _compiled(cls: type) -> dict:
    fields = _COMPILED.get(cls)
    if fields is None:
        hints = typing.get_type_hints(cls)
        fields = _COMPILED[cls] = {
            f.name: (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                     _checker(hints[f.name], f.metadata or {}))
            for f in dataclasses.fields(cls)}
    return fields


def _checker(hint: Any, meta: dict):
    """check(value, path) for one field; the common types get a direct fast path, anything
    else (and any value the fast path doubts) goes through _value, which names the fault.
    `path` is lazy (_path): formatted only when a value goes the slow way."""
    origin, args = get_origin(hint), get_args(hint)
    slow = lambda value, path: _value(hint, value, _path(path), meta)  # noqa: E731
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = _checker(next(a for a in args if a is not type(None)), meta)
        return lambda value, path: None if value is None else inner(value, path)
    if hint is str:
        max_len, non_empty = meta.get("max_len") or MAX_STR, bool(meta.get("non_empty"))

        def check_str(value, path):
            if type(value) is str and len(value) <= max_len and (value or not non_empty):
                return value
            return slow(value, path)
        return check_str
    if hint is int or hint is float:
        return _number_checker(hint, meta, slow)
    if hint is bytes:
        return lambda value, path: value if type(value) is bytes else slow(value, path)
    if hint is bool:
        return lambda value, path: value if type(value) is bool else slow(value, path)
    if hint is Any:
        return lambda value, path: value
    if origin is Literal and all(type(a) is str for a in args):
        choices = frozenset(args)
        return lambda value, path: value if type(value) is str and value in choices \
            else slow(value, path)
    if origin is tuple:
        limit = meta.get("max_items") or MAX_ITEMS
        item = _checker(args[0], _item_meta(meta))

        def check_seq(value, path):
            if type(value) not in (list, tuple) or len(value) > limit:
                return slow(value, path)
            return tuple([item(v, (path, i)) for i, v in enumerate(value)])
        return check_seq
    if dataclasses.is_dataclass(hint):
        return lambda value, path: decode(hint, value, path)
    if origin is dict and args[1] is Any:
        limit = meta.get("max_items") or MAX_ITEMS

        def check_map(value, path):
            if type(value) is dict and len(value) <= limit and all(
                    type(k) is str and len(k) <= 1024 for k in value):
                return value
            return slow(value, path)
        return check_map
    return slow


def _number_checker(hint: type, meta: dict, slow: Any):
    """An int or float field within its bounds, the way _scalar takes it."""
    low = meta.get("min_value")
    high = meta.get("max_value")
    low = -math.inf if low is None else low
    high = math.inf if high is None else high
    if hint is int:
        return lambda value, path: value if type(value) is int and low <= value <= high \
            else slow(value, path)

    def check_float(value, path):
        kind = type(value)
        if (kind is float or kind is int) and low <= value <= high and value == value \
                and abs(value) != math.inf:
            return float(value)
        return slow(value, path)
    return check_float


def _path(path: Any) -> str:
    """A lazy path, (parent, field name or item index), as text: `updates[2].result`."""
    if type(path) is str:
        return path
    parent, key = path
    base = _path(parent)
    return f"{base}[{key}]" if type(key) is int else _join(base, key)


def _value(hint: Any, value: Any, path: str, meta: dict) -> Any:
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        concrete = [o for o in options if o is not type(None)]
        if len(concrete) == 1:
            return _value(concrete[0], value, path, meta)
        for option in concrete:
            try:
                return _value(option, value, path, meta)
            except InvalidRequestError:
                continue
        _fail(path, f"expected {_name(hint)}", value)
    if origin is Literal:
        if value not in get_args(hint) or type(value) is bool:
            choices = ", ".join(repr(c) for c in get_args(hint))
            _fail(path, f"expected one of {choices}", value)
        return value
    if origin is tuple:
        return _sequence(get_args(hint)[0], value, path, meta)
    if origin is frozenset:
        return frozenset(_sequence(get_args(hint)[0], value, path, meta))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _member(hint, value, path)
    if origin is dict:
        return _mapping(get_args(hint)[1], value, path, meta)
    if dataclasses.is_dataclass(hint):
        return decode(hint, value, path)
    return _scalar(hint, value, path, meta)


def _scalar(hint: Any, value: Any, path: str, meta: dict) -> Any:
    if hint is str:
        if not isinstance(value, str):
            _fail(path, "expected a string", value)
        if len(value) > (meta.get("max_len") or MAX_STR):
            _fail(path, f"longer than {meta.get('max_len') or MAX_STR} characters", value)
        if meta.get("non_empty") and not value:
            _fail(path, "must not be empty", value)
        return value
    if hint is bool:
        if not isinstance(value, bool):
            _fail(path, "expected true or false", value)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(path, "expected an integer", value)
        return _bounded(value, path, meta)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            _fail(path, "expected a number", value)
        if not math.isfinite(value):
            _fail(path, "must be a finite number", value)
        return _bounded(float(value), path, meta)
    if hint is bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            _fail(path, "expected bytes", value)
        return bytes(value)
    if hint is Any:
        return value
    raise TypeError(f"schema: unsupported field type {hint!r} at {path}")


def _member(hint: type[enum.Enum], value: Any, path: str) -> enum.Enum:
    try:
        if isinstance(value, str | int) and not isinstance(value, bool):
            return hint(value)
    except ValueError:
        pass
    choices = ", ".join(repr(m.value) for m in hint)
    _fail(path, f"expected one of {choices}", value)


def _bounded(value: float, path: str, meta: dict) -> Any:
    low, high = meta.get("min_value"), meta.get("max_value")
    if low is not None and value < low:
        _fail(path, f"must be >= {low}", value)
    if high is not None and value > high:
        _fail(path, f"must be <= {high}", value)
    return value


def _sequence(item: Any, value: Any, path: str, meta: dict) -> tuple:
    if not isinstance(value, list | tuple):
        _fail(path, "expected a list", value)
    if len(value) > (meta.get("max_items") or MAX_ITEMS):
        _fail(path, f"more than {meta.get('max_items') or MAX_ITEMS} items", value)
    return tuple(_value(item, v, f"{path}[{i}]", _item_meta(meta)) for i, v in enumerate(value))


def _mapping(item: Any, value: Any, path: str, meta: dict) -> dict:
    if not isinstance(value, dict):
        _fail(path, "expected a map", value)
    if len(value) > (meta.get("max_items") or MAX_ITEMS):
        _fail(path, f"more than {meta.get('max_items') or MAX_ITEMS} entries", value)
    out = {}
    for key, v in value.items():
        if not isinstance(key, str) or len(key) > 1024:
            _fail(f"{path} key", "expected a string of at most 1024 characters", key)
        out[key] = _value(item, v, f"{path}[{key!r}]", _item_meta(meta))
    return out


def _item_meta(meta: dict) -> dict:
    """Bounds on a container's items: the string and number bounds, not the count."""
    return {k: v for k, v in meta.items() if k != "max_items"}


def _plain(value: Any, sparse: bool = False) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is float or value is None or kind is bool:
        return value
    if kind is dict:  # most maps (a start's env, its resources) hold scalars only: copied
        for v in value.values():
            t = type(v)
            if not (t is str or t is int or t is float or v is None or t is bool):
                return {k: _plain(v, sparse) for k, v in value.items()}
        return dict(value)
    if kind in _FIELDS or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return encode(value, sparse=sparse)  # a message class seen before: no is_dataclass
    if kind is tuple:  # most (argv, pip) hold strings only: copied as a list
        for v in value:
            t = type(v)
            if not (t is str or t is int or t is float or v is None or t is bool):
                return [_plain(v, sparse) for v in value]
        return list(value)
    if isinstance(value, tuple):
        return [_plain(v, sparse) for v in value]
    if isinstance(value, frozenset):
        return sorted(_plain(v, sparse) for v in value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v, sparse) for k, v in value.items()}
    return value


def _fail(path: str, expected: str, value: Any) -> typing.NoReturn:
    raise InvalidRequestError(f"{path}: {expected}, got {_describe(value)}", path)


def _describe(value: Any) -> str:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        text = repr(value)
        return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"
    if value is None:
        return "nothing (null)"
    return type(value).__name__


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _name(hint: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)) for a in get_args(hint))


def text(value: Any, path: str, *, max_len: int = 1024, optional: bool = False) -> str | None:
    """A single string argument, checked like a message field (None allowed if optional)."""
    if value is None and optional:
        return None
    return _scalar(str, value, path, {"max_len": max_len, "non_empty": True})


def number(value: Any, path: str, *, optional: bool = False, min_value: float | None = None,
           max_value: float | None = None) -> float | None:
    if value is None and optional:
        return None
    return _scalar(float, value, path, {"min_value": min_value, "max_value": max_value})


def flag(value: Any, path: str) -> bool:
    return _scalar(bool, value, path, {})
