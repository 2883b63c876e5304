"""Placement constraints over worker attributes (EQ / NE / IN / EXISTS); not the matching index.

A job says where its tasks may run as a dict, one entry per worker attribute:

    {"region": "us-central2",                 # EQ
     "zone": {"in": ["us-central2-a", "us-central2-b"]},
     "preemptible": True,                     # EQ on a bool attribute
     "tier": {"ne": "spot"},
     "gpu-driver": {"exists": True}}          # attribute present (False: absent)

Values are compared as normalized strings (True -> "true", 3 -> "3"), because worker
attributes arrive from `iris worker --attr k=v` as text and from providers as typed values;
both must mean the same thing. A malformed entry raises InvalidRequestError naming the key.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from iris.base.errors import InvalidRequestError


class Op(enum.Enum):
    EQ = "eq"
    NE = "ne"
    IN = "in"
    EXISTS = "exists"


def normalize_value(value: object) -> str:
    """The text form both constraints and attributes are compared in."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class Constraint:
    """One condition on one worker attribute. `values` holds normalized strings."""

    key: str
    op: Op
    values: frozenset[str] = frozenset()
    exists: bool = True

    def matches(self, attributes: Mapping[str, str]) -> bool:
        """True if a worker with these (normalized) attributes satisfies the condition."""
        present = self.key in attributes
        if self.op is Op.EXISTS:
            return present == self.exists
        if not present:
            # NE on a missing attribute holds: a worker without a tier is not "spot".
            return self.op is Op.NE
        value = attributes[self.key]
        if self.op is Op.NE:
            return value not in self.values
        return value in self.values

    def describe(self) -> str:
        if self.op is Op.EXISTS:
            return f"{self.key} {'exists' if self.exists else 'absent'}"
        shown = sorted(self.values)
        if self.op is Op.IN:
            return f"{self.key} in {shown}"
        return f"{self.key} {'==' if self.op is Op.EQ else '!='} {shown[0]}"


_SCALAR = (str, int, float, bool)


def _field(key: str) -> str:
    return f"constraints.{key}"


def _parse_one(key: object, spec: object) -> Constraint:
    if not isinstance(key, str) or not key:
        raise InvalidRequestError(f"constraints: key {key!r} must be a non-empty string",
                                  "constraints")
    if isinstance(spec, _SCALAR):
        return Constraint(key, Op.EQ, frozenset({normalize_value(spec)}))
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise InvalidRequestError(
            f"constraints.{key}: expected a value or one of {{'eq'|'ne'|'in'|'exists': ...}}, "
            f"got {spec!r}", _field(key))
    (op_name, arg), = spec.items()
    try:
        op = Op(op_name)
    except ValueError:
        raise InvalidRequestError(
            f"constraints.{key}: unknown operator {op_name!r} (use eq, ne, in, exists)",
            _field(key)) from None
    if op is Op.EXISTS:
        if not isinstance(arg, bool):
            raise InvalidRequestError(f"constraints.{key}: 'exists' takes true or false, "
                                      f"got {arg!r}", _field(key))
        return Constraint(key, op, exists=arg)
    if op is Op.IN:
        if isinstance(arg, str | bytes) or not isinstance(arg, Iterable):
            raise InvalidRequestError(f"constraints.{key}: 'in' takes a list, got {arg!r}",
                                      _field(key))
        items = list(arg)
        if not items or not all(isinstance(v, _SCALAR) for v in items):
            raise InvalidRequestError(
                f"constraints.{key}: 'in' takes a non-empty list of values, got {arg!r}",
                _field(key))
        return Constraint(key, op, frozenset(normalize_value(v) for v in items))
    if not isinstance(arg, _SCALAR):
        raise InvalidRequestError(f"constraints.{key}: {op.value!r} takes one value, "
                                  f"got {arg!r}", _field(key))
    return Constraint(key, op, frozenset({normalize_value(arg)}))


def parse_constraints(spec: Mapping[str, object] | None) -> tuple[Constraint, ...]:
    """Constraints from a job's dict, sorted by key so equal dicts give equal tuples."""
    if spec is None:
        return ()
    if not isinstance(spec, Mapping):
        raise InvalidRequestError(f"constraints: expected a mapping, got {spec!r}",
                                  "constraints")
    parsed = [_parse_one(key, value) for key, value in spec.items()]
    return tuple(sorted(parsed, key=lambda c: c.key))


def matches_all(constraints: Iterable[Constraint], attributes: Mapping[str, str]) -> bool:
    return all(c.matches(attributes) for c in constraints)
