"""`python -m iris worker --controller ADDR ...` without the CLI: how local clusters and the
providers start workers, hundreds of times a day each.

The CLI (its parser and every verb's module, ~35 modules) cost each worker 40-80 ms of CPU
at start for one verb. Here only the options of running a worker are read, each exactly as
`iris worker` takes it (cli/parser.py); anything else, a verb (list, drain, revoke), --help,
an abbreviation, a value that looks like an option or is not one of its choices, goes to the
CLI, which answers it as always (its errors, its help). Imports nothing of Iris until then.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# option -> (keyword of iris.worker.main.serve, how its value is read)
_VALUED = {"--controller": ("controller", str), "--address": ("address", str),
           "--region": ("region", str), "--attr": ("attr", str),
           "--work-dir": ("work_dir", Path), "--worker-id": ("worker_id", str),
           "--bind": ("bind", str), "--keys": ("keys", str),
           "--token-file": ("token_file", Path),
           "--preemption-notice": ("preemption_notice", str),
           "--env-cache": ("env_cache", Path)}
_FLAGS = {"--warm": "warm", "--exit-with-parent": "exit_with_parent"}
NOTICE_MODES = ("auto", "gce", "slurm", "off")


def defaults() -> dict[str, Any]:
    """serve's keywords when no option is given (as the CLI's parser defaults them)."""
    return {"controller": None, "address": None, "region": "local", "attr": [],
            "work_dir": None, "worker_id": None, "bind": "tcp://127.0.0.1:0", "keys": None,
            "token_file": None, "preemption_notice": "auto", "warm": False,
            "exit_with_parent": False, "env_cache": None}


def parse(argv: list[str]) -> dict[str, Any] | None:
    """serve's keywords from the words after `worker`, or None: not for this reader."""
    given, i = defaults(), 0
    while i < len(argv):
        name, sep, value = argv[i].partition("=")
        if name in _FLAGS and not sep:
            given[_FLAGS[name]] = True
        elif name in _VALUED:
            if not sep:
                i += 1
                if i == len(argv) or argv[i].startswith("-"):
                    return None  # missing, or the CLI's to judge (argparse's rules)
                value = argv[i]
            key, read = _VALUED[name]
            if read is Path and not value.strip():
                return None  # "" would be the current directory: the CLI refuses it
            if key == "attr":
                given["attr"] = [*given["attr"], value]
            else:
                given[key] = read(value)
        else:
            return None
        i += 1
    return given if given["preemption_notice"] in NOTICE_MODES else None


def main(argv: list[str]) -> int | None:
    """Run the worker argv describes and its exit code, or None: the CLI's to run."""
    given = parse(argv)
    if given is None:
        return None
    from iris.actors.context import check_address
    from iris.base.errors import IrisError
    from iris.worker.main import serve

    try:
        if given["controller"] or given["address"]:  # as the CLI checks it
            check_address(given["controller"] or given["address"], "--controller")
        return serve(**given)
    except IrisError as exc:
        import sys

        print(f"iris: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
