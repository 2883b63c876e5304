"""Building the parser for one command line: its verb's parser whole, every other verb's with
its help but no options. The help and the errors read the same as the whole parser's (a
verb's help shows only its own options; an unknown verb's error lists every verb); only
the time differs: argparse builds the ~300 options of every verb in ~10-20 ms, and each
command parses one verb.
"""

from __future__ import annotations

from typing import Any


def only(verbs: Any, argv: list[str]) -> Any:
    """Stands in for `verbs` (the top-level subparsers) while the verbs are added."""
    return _OnlyVerb(verbs, verb_of(argv))


def verb_of(argv: list[str]) -> str | None:
    """The verb of a command line whose global options come first (main.py hoists them):
    the first word that is neither an option nor --address's value."""
    i = 0
    while i < len(argv):
        if argv[i] == "--address":
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            return argv[i]
    return None


class _OnlyVerb:
    def __init__(self, verbs: Any, verb: str | None):
        self._verbs, self._verb = verbs, verb

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        made = self._verbs.add_parser(name, **kwargs)
        return made if name == self._verb else _Absorb()


class _Absorb:
    """Takes any call (add_argument, add_subparsers, add_parser...) and does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


__all__ = ["only", "verb_of"]
