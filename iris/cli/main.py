"""The `iris` command line: dispatch only (arguments in parser.py); each verb calls the API.

Every listing takes --json, which prints the rows the table shows as one JSON document;
under --json an error is one too ({"error": ...} on stdout, its line on stderr, exit 2).
Client verbs find the cluster with --address or $IRIS_ADDRESS. A verb's module is imported
only when that verb runs: parsing (and --help) imports none of them, and `iris controller
serve` none of the client's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import threading
from collections.abc import Callable

import iris
from iris.base import signals
from iris.base.errors import ConfigError, InvalidRequestError, IrisError
from iris.cli.one_verb import verb_of
from iris.cli.parser import build_parser
from iris.cli.parser_ops import wanted
from iris.cli.parser_types import UsageError


def _hoist_global_options(argv: list[str]) -> list[str]:
    """`--address A` is accepted after the verb too (`iris job list --address A`): it is moved
    before the verb. Nothing after a `--` is touched (that is the job's own command line)."""
    end = argv.index("--") if "--" in argv else len(argv)
    head, moved, i = [], [], 0
    while i < end:
        token = argv[i]
        if token == "--address" and i + 1 < end:
            moved += argv[i:i + 2]
            i += 2
            continue
        if token.startswith("--address="):
            moved.append(token)
        else:
            head.append(token)
        i += 1
    return moved + head + argv[end:]


def _hoist_cluster_config(argv: list[str]) -> list[str]:
    """`iris cluster start --config F` reads as `iris cluster --config F start` (the option
    is the `cluster` verb's; its actions would refuse it as unknown)."""
    end = argv.index("--") if "--" in argv else len(argv)
    if verb_of(argv[:end]) != "cluster":
        return argv
    at = argv.index("cluster") + 1
    head, moved, i = argv[:at], [], at
    rest: list[str] = []
    while i < end:
        if argv[i] == "--config" and i + 1 < end:
            moved += argv[i:i + 2]
            i += 2
            continue
        (moved if argv[i].startswith("--config=") else rest).append(argv[i])
        i += 1
    return head + moved + rest + argv[end:]


def main(argv: list[str] | None = None) -> int:
    argv = _hoist_global_options(list(sys.argv[1:] if argv is None else argv))
    argv = _hoist_cluster_config(argv)
    as_json = "--json" in argv[:argv.index("--") if "--" in argv else len(argv)]
    try:
        args = build_parser(argv).parse_args(argv)
    except UsageError as exc:
        return _fail(f"{exc.usage}{exc.prog}: error: {exc.message}", exc.message, as_json,
                     {"usage": True})
    key = ("operate", None) if wanted(args) else (args.verb, getattr(args, "action", None))
    try:
        handler = _handler(key)
        if key in _CLIENT_VERBS:
            with iris.connect(args.address):
                return handler(args)
        return handler(args)
    except IrisError as exc:
        field = getattr(exc, "field", None)
        return _fail(f"iris: {exc}", str(exc), as_json,
                     {"kind": type(exc).__name__, **({"field": field} if field else {})})
    except KeyboardInterrupt:
        return 130


def _fail(text: str, message: str, as_json: bool, facts: dict) -> int:
    """An error: `text` on stderr; with --json, also {"error": message, ...} on stdout, where
    the result would have been, so a script reading the JSON sees why. Exit code 2."""
    print(text, file=sys.stderr)
    if as_json:
        print(json.dumps({"error": message, **facts}))
    return 2


def _handler(key: tuple[str, str | None]) -> Callable[[argparse.Namespace], int]:
    target = _HANDLERS[key]
    if callable(target):
        return target
    module, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(f"iris.cli.{module}"), name)
    except ImportError as exc:  # a broken or partial install: say which, not a traceback
        raise ConfigError(f"cannot load this command's module iris.cli.{module}: {exc}; the "
                          "install looks broken: reinstall Iris") from exc


def _demo(args: argparse.Namespace) -> int:
    from iris.base.resources import parse_size
    from iris.cli.demo import run_demo

    for flag, value in (("--rollouts", args.rollouts), ("--iterations", args.iterations)):
        if value < 1:
            raise InvalidRequestError(f"{flag} {value}: must be at least 1", flag)
    weights = parse_size(args.weights, "--weights")
    if not 0 < weights <= 8 << 30:
        raise InvalidRequestError(f"--weights {args.weights}: must be more than 0 and at most "
                                  "8GiB (the trainer and the shared copy both hold it)")
    summary = run_demo(args.rollouts, args.iterations,
                       out=sys.stderr if args.json else sys.stdout, weights_bytes=weights)
    if args.json:
        print(json.dumps(summary))
    return 0


def _keys_generate(args: argparse.Namespace) -> int:
    try:
        root = iris.generate_keys(args.dir)
    except OSError as exc:
        raise InvalidRequestError(f"cannot write keys to {args.dir}: {exc.strerror or exc}",
                                  "dir") from exc
    if args.json:
        print(json.dumps({"dir": str(root), "authorized": str(root / "authorized")}))
    else:
        print(f"cluster keys written to {root}; authorized public keys live in "
              f"{root}/authorized")
    return 0


def _stop_event() -> threading.Event:
    """Set by SIGTERM or SIGINT. Not the worker's StopEvent: importing iris.worker.main for it
    cost a controller ~0.1 CPU-s at each start (the whole worker), for a reason nobody reads."""
    import signal

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _cluster_start(args: argparse.Namespace) -> int:
    from iris.client.cluster import local_share
    from iris.dashboard import launch

    try:
        share = local_share(args.workers, args.cpu, args.memory)  # refused before starting
    except InvalidRequestError as exc:
        flag = {"worker_cpu": "--cpu", "worker_memory": "--memory"}.get(exc.field, exc.field)
        raise InvalidRequestError(str(exc).replace(exc.field or "", flag, 1), flag) from exc
    with iris.local_cluster(workers=args.workers, bind=args.bind, worker_cpu=args.cpu,
                            worker_memory=args.memory) as cluster:
        dashboard = launch(cluster.node, cluster.address, host=args.dashboard_host,
                           port=args.dashboard_port)
        try:
            if args.json:  # one line, once it serves: a script reads the address from it
                print(json.dumps({"address": cluster.address, "workers": args.workers,
                                  "worker_offers": str(share) if args.workers else None,
                                  "dashboard": dashboard.url,
                                  "login_url": dashboard.login_url,
                                  "note": dashboard.note}), flush=True)
            else:
                _print_started(cluster.address, args.workers, share, dashboard)
            signals.wait_for(_stop_event())  # in slices: a signal taken by another thread
        finally:
            dashboard.stop()
    return 0


def _print_started(address: str, workers: int, share, dashboard) -> None:
    print(f"cluster running at {address} with {workers} workers"
          + (f" (each offers {share})" if workers else ""), flush=True)
    print(f"  export IRIS_ADDRESS={address}", flush=True)
    print(f"  dashboard: {dashboard.url}  (kills need its token: {dashboard.login_url})",
          flush=True)
    if dashboard.note:
        print(f"  note: {dashboard.note}", flush=True)
    print("  try: iris job run -- python -c 'print(42)'   (Ctrl-C here stops the cluster)",
          flush=True)


def _controller_serve(args: argparse.Namespace) -> int:
    from iris.controller.main import run_controller

    cluster = None
    if args.config is not None:
        from iris.controller.config import load_config

        cluster = load_config(args.config)  # refuse a bad config before serving anything
    run_controller(args.state_dir, bind=args.bind, keys_dir=args.keys, stop=_stop_event(),
                   cluster=cluster, on_start=lambda node: _serve_dashboard(args, cluster, node),
                   restore="none" if args.no_restore else args.restore,
                   take_over=args.take_over, report_fronts=args.report_fronts)
    return 0


def _serve_dashboard(args: argparse.Namespace, cluster, node) -> Callable[[], None]:
    import dataclasses

    from iris.dashboard import launch

    groups = ([dataclasses.asdict(g) for g in cluster.scale_groups()]
              if cluster is not None else None)
    dashboard = launch(node, node.address, args.state_dir, host=args.dashboard_host,
                       port=args.dashboard_port, scale_groups=groups)
    print(f"  dashboard: {dashboard.url}  (kills need its token: {dashboard.login_url})",
          flush=True)
    if dashboard.note:
        print(f"  note: {dashboard.note}", flush=True)
    return dashboard.stop


def _worker(args: argparse.Namespace) -> int:
    if args.action in ("list", "drain", "revoke"):
        from iris.cli import jobs

        with iris.connect(args.address or args.controller):
            return {"list": jobs.worker_list, "drain": jobs.worker_drain,
                    "revoke": jobs.worker_revoke}[args.action](args)
    if args.target is not None:
        raise InvalidRequestError(f"iris worker {args.target}: unknown action (list, drain "
                                  "or revoke)")
    from iris.actors.context import check_address
    from iris.worker.command import defaults
    from iris.worker.main import serve

    if args.controller or args.address:  # none: serve says so (as `python -m iris worker`)
        check_address(args.controller or args.address, "--controller")

    return serve(**{key: getattr(args, key) for key in defaults()})


def _actor_list(args: argparse.Namespace) -> int:
    from iris.cli import jobs

    rows = [row for row in iris.list_actors(args.prefix)
            if args.all or not row["name"].startswith("/iris/")]
    if not args.json:
        rows = [{**row, "registered": jobs.iso(row.get("registered_at"))} for row in rows]
    jobs.print_rows(rows, ["name", "address", "registered"] if not args.json else [],
                    args.json)
    return 0


def _completion(args: argparse.Namespace) -> int:
    from iris.cli.completion import script

    print(script(build_parser(), args.shell))
    return 0


# (verb, action) -> its handler: a function here, or "module:function" of iris.cli, imported
# when that verb runs.
_HANDLERS: dict[tuple[str, str | None], str | Callable[[argparse.Namespace], int]] = {
    ("operate", None): "operate:run",  # every verb parser_ops.wanted() says is an operator's
    ("demo", None): _demo,
    ("keys", "generate"): _keys_generate,
    ("cluster", "start"): _cluster_start,
    ("cluster", "status"): "jobs:cluster_status",
    ("cluster", "checkpoint"): "checkpoints:checkpoint",
    ("cluster", "checkpoints"): "checkpoints:checkpoints",
    ("controller", "serve"): _controller_serve,
    ("worker", None): _worker,
    ("worker", "list"): _worker,
    ("worker", "drain"): _worker,
    ("worker", "revoke"): _worker,
    ("actor", "list"): _actor_list,
    ("completion", None): _completion,
    ("job", "run"): "jobs:job_run",
    ("job", "list"): "jobs:job_list",
    ("job", "status"): "jobs:job_status",
    ("job", "stop"): "jobs:job_stop",
    ("job", "logs"): "jobs:job_logs",
    ("user", "budget"): "budgets:budget",
    ("job", "summary"): "inspect:job_summary",
    ("job", "url"): "inspect:job_url",
    ("task", "stack"): "inspect:task_stack",
    ("task", "profile"): "inspect:task_profile",
    ("task", "exec"): "inspect:task_exec",
}
# The verbs that run connected to the cluster (--address or $IRIS_ADDRESS).
_CLIENT_VERBS = {("cluster", "status"), ("cluster", "checkpoint"), ("cluster", "checkpoints"),
                 ("actor", "list"), ("job", "run"), ("job", "list"), ("job", "status"),
                 ("job", "stop"), ("job", "logs"), ("user", "budget"), ("job", "summary"),
                 ("job", "url"), ("task", "stack"), ("task", "profile"), ("task", "exec")}
