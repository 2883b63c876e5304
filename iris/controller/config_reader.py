"""Reading one mapping of a YAML config with clear errors: every message starts with the key
path, unknown keys are refused with the closest known one, and types are checked exactly
(a bool is not a number). The mechanism only; what a cluster config holds is config.py.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from iris.base.errors import ConfigError

# Names end up in GCP labels and TPU node ids, which allow only lowercase letters, digits
# and '-', start with a letter, and stop at 63 characters.
NAME = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
REQUIRED = object()  # `Section.get`'s default: the key must be there


class Section:
    """One mapping of the YAML tree, with its key path, refusing keys it does not know."""

    def __init__(self, data: Any, path: str, allowed: tuple[str, ...]):
        if not isinstance(data, dict):
            raise ConfigError(f"{path or '<top level>'}: expected a mapping, got {kind_of(data)}")
        self.data, self.path = data, path
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(
                    f"{self.key(key)}: unknown key{hint}; known keys: {', '.join(allowed)}"
                )

    def key(self, name: Any) -> str:
        return f"{self.path}.{name}" if self.path else str(name)

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = REQUIRED) -> Any:
        value = self.data.get(name)
        if value is None:
            if default is REQUIRED:
                raise ConfigError(f"{self.key(name)}: required")
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            raise ConfigError(f"{self.key(name)}: expected {kinds_text(kinds)}, got {value!r}")
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds):
            raise ConfigError(
                f"{self.key(name)}: expected {kinds_text(kinds)}, got {kind_of(value)} {value!r}"
            )
        return value

    def count(self, name: str, default: Any = REQUIRED) -> int:
        value = self.get(name, int, default)
        if value is not None and value < 0:
            raise ConfigError(f"{self.key(name)}: must be >= 0, got {value}")
        return value

    def name(self, name: str, default: Any = REQUIRED) -> str:
        value = self.get(name, str, default)
        if value is not None and not NAME.match(value):
            raise ConfigError(f"{self.key(name)}: {bad_name(value)}")
        return value

    def zones(self, name: str, default: Any = REQUIRED) -> tuple[str, ...]:
        value = self.get(name, list, default)
        if value is None:
            return ()
        for i, zone in enumerate(value):
            if not isinstance(zone, str) or not NAME.match(zone):
                raise ConfigError(f"{self.key(name)}[{i}]: {bad_name(zone)}")
        if len(set(value)) != len(value):
            raise ConfigError(f"{self.key(name)}: lists a zone twice")
        return tuple(value)


def kind_of(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def kinds_text(kinds: tuple[type, ...]) -> str:
    return " or ".join("a number" if k is float else k.__name__ for k in kinds)


def bad_name(value: Any) -> str:
    return (f"{value!r} is not a valid name: use lowercase letters, digits and '-', "
            "start with a letter, at most 63 characters")
