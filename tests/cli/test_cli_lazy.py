"""The command line imports a verb's module only when that verb runs (issue 33): parsing and
--help import none, and every verb's lazily named handler still resolves."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys

import pytest

from iris.cli.parser import build_parser

cli_main = importlib.import_module("iris.cli.main")  # the module; iris.cli.main is also the function

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _paths(child, (*path, name))


@pytest.mark.parametrize("key", sorted(cli_main._HANDLERS, key=str))
def test_cli_every_verbs_handler_resolves_to_a_function(key):
    assert callable(cli_main._handler(key))


def test_cli_every_client_verb_has_a_handler():
    assert set(cli_main._HANDLERS) >= cli_main._CLIENT_VERBS


@pytest.mark.parametrize("path", [p for p in _paths(build_parser()) if p],
                         ids=lambda p: " ".join(p))
def test_cli_every_verbs_help_prints_its_usage(path, capsys):
    with pytest.raises(SystemExit) as done:
        cli_main.main([*path, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: iris {' '.join(path)}")


def test_cli_help_and_parsing_import_no_verbs_module():
    probe = ("import sys, json\nfrom iris.cli.main import main\n"
             "for argv in (['--help'], ['job', 'list', '--help'], ['slice', 'list', '--help'],"
             " ['task', 'profile', '--help']):\n"
             "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
             "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    for heavy in ("iris.actors", "iris.client", "iris.controller", "iris.worker",
                  "iris.cli.jobs", "iris.cli.operate", "iris.cli.slices", "iris.cli.inspect"):
        assert heavy not in loaded, f"parsing imported {heavy}"


def _outcome(parser: argparse.ArgumentParser, argv: list[str], capsys) -> tuple:
    try:
        parsed = vars(parser.parse_args(argv))
        code = None
    except SystemExit as exc:
        parsed, code = None, exc.code
    out = capsys.readouterr()
    return parsed, code, out.out, out.err


@pytest.mark.parametrize("path", list(_paths(build_parser())), ids=lambda p: " ".join(p))
def test_cli_one_verbs_parser_helps_and_refuses_as_the_whole_one(path, capsys):
    """main.py builds only the verb's options (one_verb.py): same help, same errors."""
    for argv in ([*path, "--help"], [*path], [*path, "--no-such-option"],
                 ["--address", "tcp://h:1", *path, "--help"]):
        assert _outcome(build_parser(argv), argv, capsys) == \
            _outcome(build_parser(), argv, capsys), argv


@pytest.mark.parametrize("argv", [
    ["job", "run", "--cpu", "2", "--", "python", "-c", "print(1)"], ["no-such-verb"],
    ["--address", "tcp://h:1", "job", "logs", "-f", "train"], [], ["--version"],
    ["controller", "serve", "--state-dir", "s"], ["slice", "list", "--config", "c.yaml"],
    ["cluster", "--config", "c.yaml", "slice", "list"], ["task", "profile", "t/0"]])
def test_cli_one_verbs_parser_parses_as_the_whole_one(argv, capsys):
    assert _outcome(build_parser(argv), argv, capsys) == _outcome(build_parser(), argv, capsys)
