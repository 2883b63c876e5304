"""Gang protocol messages as plain msgpack-able dicts, and back, validated; not the transport.

Region and controller actors exchange these through msgpack (never pickle: a peer's bytes
are never unpickled). A malformed dict raises ProtocolError naming the field, and builds
nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from iris.base.errors import InvalidRequestError, ProtocolError
from iris.controller.gangs.protocol import (
    AbortRequest,
    CommitRefused,
    CommitRequest,
    Committed,
    Refused,
    Released,
    ReleaseRequest,
    Reserved,
    ReserveRequest,
)
from iris.controller.scheduling.constraints import Constraint, Op
from iris.controller.scheduling.model import GangShape

_TYPES = {cls.__name__: cls for cls in (ReserveRequest, CommitRequest, AbortRequest,
                                        ReleaseRequest, Reserved, Refused, Committed,
                                        CommitRefused, Released)}
_SCALARS = {"str": str, "int": int, "float": (int, float)}


def to_wire(msg: object) -> dict[str, object]:
    name = type(msg).__name__
    if name not in _TYPES:
        raise ProtocolError(f"not a gang protocol message: {name}")
    out: dict[str, object] = {"type": name}
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if isinstance(value, GangShape):
            value = shape_to_wire(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def from_wire(data: object) -> object:
    if not isinstance(data, Mapping) or data.get("type") not in _TYPES:
        raise ProtocolError(f"gang message: unknown or missing 'type' in {data!r:.200}")
    cls = _TYPES[data["type"]]
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            raise ProtocolError(f"{cls.__name__}: missing field {f.name!r}")
        kwargs[f.name] = _field(cls.__name__, f.name, str(f.type), data[f.name])
    return cls(**kwargs)


def _field(msg: str, name: str, type_name: str, value: object) -> object:
    if type_name == "GangShape":
        return shape_from_wire(msg, value)
    if type_name == "tuple[str, ...]":
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ProtocolError(f"{msg}.{name}: expected a list of strings, got {value!r:.100}")
        return tuple(value)
    expected = _SCALARS[type_name]
    if isinstance(value, bool) or not isinstance(value, expected):
        raise ProtocolError(f"{msg}.{name}: expected {type_name}, got {value!r:.100}")
    return value


def shape_to_wire(shape: GangShape) -> dict[str, object]:
    return {"accelerator": shape.accelerator, "hosts": shape.hosts,
            "whole_slices": shape.whole_slices, "one_pool": shape.one_pool,
            "constraints": [{"key": c.key, "op": c.op.value, "values": sorted(c.values),
                             "exists": c.exists} for c in shape.constraints]}


def shape_from_wire(msg: str, value: object) -> GangShape:
    try:
        if not isinstance(value, Mapping):
            raise TypeError("not a mapping")
        cons = tuple(Constraint(str(c["key"]), Op(c["op"]), frozenset(map(str, c["values"])),
                                bool(c["exists"])) for c in value["constraints"])
        accel = value["accelerator"]
        if accel is not None and not isinstance(accel, str):
            raise TypeError("accelerator must be a string or null")
        one_pool = value.get("one_pool", False)  # absent from peers before GPU gangs
        if not isinstance(one_pool, bool):
            raise TypeError("one_pool must be a bool")
        return GangShape(accel, int(value["hosts"]), int(value["whole_slices"]), cons,
                         one_pool)
    except (KeyError, TypeError, ValueError, InvalidRequestError) as exc:
        raise ProtocolError(f"{msg}.shape: malformed gang shape ({exc})") from exc
