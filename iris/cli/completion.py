"""Shell completion scripts for `iris`, written out from the argument parser. No behaviour.

The script is static (verbs, actions, options and choices as they are in parser.py), so a
completion costs no Python start-up (~0.3 s, which a Tab press would feel). zsh runs the
bash script through bashcompinit, which zsh has shipped since 4.3.
"""

from __future__ import annotations

import argparse


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(parser: argparse.ArgumentParser) -> list[str]:
    words = list(_children(parser))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        words += [o for o in action.option_strings if o.startswith("--")]
        if not action.option_strings and action.choices:
            words += [str(c) for c in action.choices]
    return words


def _walk(parser: argparse.ArgumentParser, path: str = "") -> dict[str, list[str]]:
    """Each command path ("", "job", "job run") -> the words that may follow it."""
    out = {path: _words(parser)}
    for name, child in _children(parser).items():
        out.update(_walk(child, f"{path} {name}".strip()))
    return out


def _value_choices(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Options whose values are a closed list (`--priority`): the list, anywhere."""
    out: dict[str, list[str]] = {}
    stack = [parser]
    while stack:
        p = stack.pop()
        stack += _children(p).values()
        for action in p._actions:
            if action.option_strings and action.choices:
                for option in action.option_strings:
                    out[option] = [str(c) for c in action.choices]
    return out


def bash_script(parser: argparse.ArgumentParser) -> str:
    paths = _walk(parser)
    known = "|".join(f'"{p}"' for p in paths if p)
    cases = "\n".join(f'        "{p}") words="{" ".join(w)}" ;;' for p, w in paths.items())
    values = "\n".join(f'        {opt}) COMPREPLY=($(compgen -W "{" ".join(c)}" -- "$cur")); '
                       "return 0 ;;" for opt, c in _value_choices(parser).items())
    return f"""# iris completion for bash: source <(iris completion bash)
_iris_complete() {{
    local cur prev path="" w i words
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i=1; i<COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        [[ "$w" == "--" ]] && return 0  # the job's own command line: leave it to the shell
        case "${{path:+$path }}$w" in
            {known}) path="${{path:+$path }}$w" ;;
        esac
    done
    case "$prev" in
{values}
    esac
    case "$path" in
{cases}
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _iris_complete iris
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` ("bash" or "zsh")."""
    text = bash_script(parser)
    if shell == "zsh":
        return ("# iris completion for zsh: source <(iris completion zsh)\n"
                "autoload -U +X bashcompinit && bashcompinit\n" + text)
    return text
