"""Printing benchmark figures: number formatting and progress lines (stderr)."""

from __future__ import annotations

import importlib.util
import sys


def fmt(value: float | None) -> str:
    """A figure for a table: thousands separated from 100 up, 3 significant digits below."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def step(what: str) -> None:
    """Say on stderr what is being measured now (stdout keeps the figures)."""
    print(f"  measuring {what} ...", file=sys.stderr, flush=True)


def peer_installed() -> bool:
    """Is Ray (the peer) importable? Without it the Iris figures still print, with a note
    on stderr saying how to get the peer's: a bench must not lose its own figures to it."""
    if importlib.util.find_spec("ray") is not None:
        return True
    print("  ray is not installed, so no peer figures this run: pip install -e '.[bench]'",
          file=sys.stderr, flush=True)
    return False
