"""The command line as a newcomer meets it: help for every option, `iris --help`, completion."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from iris.cli.parser import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _every_parser(parser=None, path=("iris",)):
    parser = parser or build_parser()
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _every_parser(child, (*path, name))


def _options():
    for path, parser in _every_parser():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            yield path, action


@pytest.mark.parametrize("path,action", list(_options()),
                         ids=lambda v: v if isinstance(v, str) else "/".join(
                             v.option_strings or [v.dest]))
def test_cli_every_option_has_help_and_values_have_an_example(path, action):
    assert action.help and len(action.help) > 10, f"{path} {action.option_strings}: no help"
    takes_value = action.nargs != 0 and not isinstance(action, argparse._VersionAction)
    if takes_value and not action.choices:
        assert "e.g." in action.help, f"{path} {action.option_strings or action.dest}: " \
                                      f"no example in {action.help!r}"


def test_cli_every_verb_shows_an_example_in_its_help():
    leaves = [(p, parser) for p, parser in _every_parser()
              if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)]
    assert len(leaves) >= 13
    for path, parser in leaves:
        assert "example" in (parser.epilog or ""), f"{path} --help shows no example"


def _iris(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iris", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": ROOT})


def test_cli_top_help_reads_as_a_users_guide():
    out = _iris("--help")
    assert out.returncode == 0
    assert "First steps:" in out.stdout and "iris cluster start --local" in out.stdout
    assert "iris job run -- " in out.stdout and "iris completion bash" in out.stdout
    assert "dispatch" not in out.stdout and "argument parsing" not in out.stdout
    run_help = _iris("job", "run", "--help").stdout
    assert "--memory SIZE" in run_help and "4GiB" in run_help and "examples:" in run_help


def _complete(script: str, *words: str) -> list[str]:
    line = " ".join(f"'{w}'" for w in words)
    done = subprocess.run(["bash", "-c", f'source /dev/stdin; COMP_WORDS=({line}); '
                           f'COMP_CWORD={len(words) - 1}; _iris_complete; '
                           'printf "%s\\n" "${COMPREPLY[@]}"'],
                          input=script, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_cli_bash_completion_completes_verbs_actions_options_and_choices():
    out = _iris("completion", "bash")
    assert out.returncode == 0 and "complete -o default -F _iris_complete iris" in out.stdout
    script = out.stdout
    assert {"cluster", "job", "actor", "worker", "completion"} <= set(_complete(script, "iris", ""))
    assert _complete(script, "iris", "job", "l") == ["list", "logs"]
    assert "--build-logs" in _complete(script, "iris", "job", "logs", "--b")
    assert _complete(script, "iris", "job", "run", "--priority", "b") == ["batch"]
    assert _complete(script, "iris", "job", "run", "--", "pyth") == []  # the job's own words
    zsh = _iris("completion", "zsh")
    assert zsh.returncode == 0 and "bashcompinit" in zsh.stdout


@pytest.mark.parametrize("argv,message", [
    (["cluster", "start", "--local", "--cpu", "0"], "--cpu: expected a number > 0"),
    (["cluster", "start", "--local", "--memory", "lots"], "--memory: cannot read size 'lots'"),
    (["job", "logs", "x", "--task", "-1"], "task must be an integer >= 0"),
    (["job", "logs", "x", "--grep", "("], "invalid --grep pattern '('"),
])
def test_cli_bad_option_is_refused_naming_it_before_anything_starts(argv, message):
    # The address names nothing: a refusal that needed the cluster would hang, then differ.
    out = _iris(*argv, "--address", "tcp://127.0.0.1:1")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"iris: {message}"), out.stderr
    assert "waiting for the controller" not in out.stderr and "cluster running" not in out.stdout
