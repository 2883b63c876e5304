"""Layer 6: the `iris` command line."""

from iris.cli.main import main

__all__ = ["main"]
