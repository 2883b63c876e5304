"""The command line's own argparse pieces: a refusal raised rather than printed (so main can
say it as JSON too), and the types of options that must not start anything when wrong."""

from __future__ import annotations

import argparse
from pathlib import Path


class UsageError(SystemExit):
    """A command line argparse refuses: raised (exit code 2) instead of printed, so that main
    can also say it as JSON under --json. Its text reads as argparse's own."""

    def __init__(self, message: str, prog: str, usage: str):
        super().__init__(2)
        self.message, self.prog, self.usage = message, prog, usage


class Parser(argparse.ArgumentParser):
    """Every verb's parser (subparsers take their parent's class)."""

    def error(self, message: str):
        raise UsageError(message, self.prog, self.format_usage())


def dir_path(text: str) -> Path:
    """A directory option's value; an empty one (`--env-cache ""`, an unset variable) would
    be the current directory, so it is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give a directory, e.g. /var/lib/iris")
    return Path(text)


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535, refused before anything starts."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{number}: a port is 0 (any free one) to 65535")
    return number
