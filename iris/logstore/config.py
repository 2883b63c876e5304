"""Where a cluster keeps its task logs (the `logs:` section of the cluster config), and
`open_sink`, which turns that into a sink. Not the sinks themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from iris.base.errors import ConfigError
from iris.logstore.sinks import LocalDirSink, LogSink

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_PREFIX = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


@dataclass(frozen=True)
class LogStoreConfig:
    """`kind` is "local" (a directory on this machine, the embedded default) or "gcs".

    root:   directory for kind="local"; the local cluster puts it in its state dir.
    bucket: GCS bucket name for kind="gcs" (3-63 chars, GCS naming rules).
    prefix: object-name prefix inside the bucket or root; default "iris" so a bucket shared
            with other tools keeps Iris objects under one folder.
    Credentials are never configured here: production takes them from the environment.
    """

    kind: str = "local"
    root: str = ""
    bucket: str = ""
    prefix: str = "iris"

    def __post_init__(self) -> None:
        if self.kind not in ("local", "gcs"):
            raise ConfigError(f"logs.kind must be 'local' or 'gcs', got {self.kind!r}")
        if self.kind == "local" and not self.root:
            raise ConfigError("logs.root is required when logs.kind is 'local'")
        if self.kind == "gcs" and not _BUCKET.match(self.bucket or ""):
            raise ConfigError(f"logs.bucket {self.bucket!r} is not a valid GCS bucket name "
                              "(3-63 lowercase letters, digits, '-', '_' or '.')")
        if self.prefix and not _PREFIX.match(self.prefix):
            raise ConfigError(f"logs.prefix {self.prefix!r} must be '/'-separated names of "
                              "letters, digits, '.', '_' or '-', without leading or trailing '/'")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogStoreConfig:
        """Build from the `logs:` mapping of a YAML cluster config; unknown keys are errors."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"logs must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown key(s) in logs: {', '.join(map(str, unknown))}; "
                              f"expected {', '.join(sorted(known))}")
        for key, value in data.items():
            if not isinstance(value, str):
                raise ConfigError(f"logs.{key} must be a string, got {type(value).__name__}")
        return cls(**data)


def open_sink(config: LogStoreConfig, gcs_client: Any = None) -> LogSink:
    """The sink `config` names. `gcs_client` overrides the environment's (tests, emulators)."""
    if config.kind == "local":
        root = f"{config.root.rstrip('/')}/{config.prefix}" if config.prefix else config.root
        return LocalDirSink(root)
    from iris.logstore.gcs import GcsSink  # here: tasks import iris without google-cloud

    return GcsSink(config.bucket, config.prefix, client=gcs_client)
