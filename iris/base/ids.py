"""Identifiers: short random ids for nodes and requests, and validated hierarchical names.

Job names are paths like `/alice/rl/rollout-3`: each component is 1-63 characters of
letters, digits, `-`, `_` and `.`, so they can appear in log object paths and CLI output
without quoting.
"""

from __future__ import annotations

import os
import random
import re

_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


# Ids name things; they authorize nothing (secrets and tokens come from `secrets`, in
# actors/tokens.py and controller/credentials.py), so a generator seeded once from the OS
# is enough, and cheaper than it looks: os.urandom lets go of the GIL for its system call,
# and getting it back behind a busy thread cost the controller's thread up to a switch
# interval per id (11% of its samples under a gang burst, two ids a task). Reseeded in a
# forked child, so parent and child never draw the same ids.
_RNG = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _RNG.seed(os.urandom(32)))


def new_id(prefix: str = "", nbytes: int = 6) -> str:
    """A random hex id, e.g. new_id("node-") -> "node-3fa2c19b0d4e"."""
    return prefix + _RNG.getrandbits(8 * nbytes).to_bytes(nbytes, "big").hex()


def validate_component(component: str, what: str = "name") -> str:
    if not isinstance(component, str) or not _COMPONENT.match(component):
        raise ValueError(
            f"invalid {what} {component!r}: use 1-63 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    return component


def join_path(parent: str, name: str) -> str:
    """The absolute path of `name` under `parent` (an absolute `name` is kept as is)."""
    if name.startswith("/"):
        return normalize_path(name)
    for part in name.split("/"):
        validate_component(part)
    parent = normalize_path(parent) if parent else ""
    return f"{parent.rstrip('/')}/{name}"


def normalize_path(path: str) -> str:
    """Validate an absolute path like `/a/b` and return it without a trailing slash."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"invalid path {path!r}: must start with '/'")
    parts = [p for p in path.split("/") if p]
    for part in parts:
        validate_component(part)
    return "/" + "/".join(parts)


def parent_path(path: str) -> str:
    """`/a/b/c` -> `/a/b`; the root `/x` has parent `/`."""
    path = normalize_path(path)
    head = path.rsplit("/", 1)[0]
    return head or "/"
