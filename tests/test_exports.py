"""The public names: every name in iris.__all__ imports, and every name the README documents
as iris.X is exported."""

from __future__ import annotations

import re
from pathlib import Path

import iris

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_exported_name_imports():
    missing = [name for name in iris.__all__ if not hasattr(iris, name)]
    assert not missing, f"in iris.__all__ but not importable: {missing}"


def test_every_documented_name_is_exported():
    documented = set(re.findall(r"\biris\.([A-Za-z_][A-Za-z0-9_]*)\b", README.read_text()))
    modules = {"actors", "backends", "base", "cli", "client", "compat", "controller", "dashboard", "logstore",
               "wire", "worker"}  # package paths in the layout section, not API names
    missing = sorted(n for n in documented - modules if n not in iris.__all__)
    assert not missing, f"documented as iris.X but not in iris.__all__: {missing}"


def test_every_documented_error_is_exported():
    errors = set(re.findall(r"`(?:iris\.)?([A-Z][A-Za-z]*Error)`", README.read_text()))
    errors -= {"TimeoutError"}  # the builtin DeadlineExceededError also is
    missing = sorted(errors - set(iris.__all__))
    assert not missing, f"errors the README names but iris does not export: {missing}"
    for name in errors:
        assert issubclass(getattr(iris, name), iris.IrisError), name
