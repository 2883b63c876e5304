"""The `iris` command line: argument parsing and dispatch only; each verb calls the API.

Every listing takes --json, which prints exactly what the table shows as one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

import iris
from iris.base.errors import IrisError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iris", description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)

    demo = verbs.add_parser("demo", help="run the RL trainer/rollout demo on a local cluster")
    demo.add_argument("--rollouts", type=int, default=3, help="rollout processes (default 3)")
    demo.add_argument("--iterations", type=int, default=4, help="pulls/pushes per rollout")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")

    keys = verbs.add_parser("keys", help="CURVE cluster keys").add_subparsers(
        dest="action", required=True)
    generate = keys.add_parser("generate", help="create a cluster keypair in DIR")
    generate.add_argument("dir")

    cluster = verbs.add_parser("cluster", help="run or inspect a cluster").add_subparsers(
        dest="action", required=True)
    start = cluster.add_parser("start", help="run an embedded cluster in the foreground")
    start.add_argument("--local", action="store_true", required=True)
    start.add_argument("--bind", default="tcp://127.0.0.1:0")

    actor = verbs.add_parser("actor", help="registered actors").add_subparsers(
        dest="action", required=True)
    listing = actor.add_parser("list", help="list registered actor names")
    listing.add_argument("--address", help="cluster address (default: $IRIS_ADDRESS)")
    listing.add_argument("--prefix", default="/")
    listing.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _HANDLERS[(args.verb, getattr(args, "action", None))](args)
    except IrisError as exc:
        print(f"iris: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _demo(args: argparse.Namespace) -> int:
    from iris.cli.demo import run_demo

    summary = run_demo(args.rollouts, args.iterations,
                       out=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(summary))
    return 0


def _keys_generate(args: argparse.Namespace) -> int:
    root = iris.generate_keys(args.dir)
    print(f"cluster keys written to {root}; authorized public keys live in {root}/authorized")
    return 0


def _cluster_start(args: argparse.Namespace) -> int:
    with iris.local_cluster(bind=args.bind) as cluster:
        print(f"cluster running at {cluster.address}", flush=True)
        print(f"  export IRIS_ADDRESS={cluster.address}", flush=True)
        threading.Event().wait()
    return 0


def _actor_list(args: argparse.Namespace) -> int:
    with iris.connect(args.address) as ctx:
        rows = ctx.list_actors(args.prefix)
    _print_rows(rows, ["name", "address", "owner"], args.json)
    return 0


def _print_rows(rows: list[dict[str, Any]], columns: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows))
        return
    widths = [max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(w) for c, w in zip(columns, widths,
                                                                      strict=True)))


_HANDLERS = {
    ("demo", None): _demo,
    ("keys", "generate"): _keys_generate,
    ("cluster", "start"): _cluster_start,
    ("actor", "list"): _actor_list,
}
