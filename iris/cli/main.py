"""The `iris` command line: argument parsing and dispatch only; each verb calls the API.

Every listing takes --json, which prints exactly what the table shows as one JSON document.
Client verbs find the cluster with --address or $IRIS_ADDRESS.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import iris
from iris.base.errors import IrisError
from iris.cli import jobs, operate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iris", description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="cluster address (default: $IRIS_ADDRESS)")
    parser.add_argument("--version", action="version", version=f"iris {iris.__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True)

    demo = verbs.add_parser("demo", help="run the RL trainer/rollout demo on a local cluster")
    demo.add_argument("--rollouts", type=int, default=3, help="rollout tasks (default 3)")
    demo.add_argument("--iterations", type=int, default=4, help="pulls/pushes per rollout")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")

    keys = verbs.add_parser("keys", help="CURVE cluster keys").add_subparsers(
        dest="action", required=True)
    keys.add_parser("generate", help="create a cluster keypair in DIR").add_argument("dir")

    cluster_parser = verbs.add_parser("cluster", help="run or inspect a cluster")
    cluster_parser.add_argument("--config", type=Path, help="cluster config YAML: operate "
                                "the GCP cluster it describes (start, stop, slice, vm...)")
    cluster = cluster_parser.add_subparsers(dest="action", required=True)
    start = cluster.add_parser("start", help="--config F: create the controller VM and wait "
                               "for it; --local: run an embedded cluster in the foreground")
    start.add_argument("--local", action="store_true")
    start.add_argument("--json", action="store_true")
    start.add_argument("--timeout", type=float, default=operate.START_TIMEOUT_S,
                       metavar="SECONDS", help="with --config: how long to wait for the "
                       "controller to answer")
    start.add_argument("--workers", type=int, default=2)
    start.add_argument("--bind", default="tcp://127.0.0.1:0")
    _dashboard_options(start)
    cluster.add_parser("status", help="workers and jobs at a glance").add_argument(
        "--json", action="store_true")
    operate.add_cluster_actions(cluster)

    controller = verbs.add_parser("controller", help="operator: the controller role")
    controller_sub = controller.add_subparsers(dest="action", required=True)
    serve = controller_sub.add_parser(
        "serve", help="run the controller (and registry) in the foreground")
    serve.add_argument("--state-dir", required=True, type=Path)
    serve.add_argument("--bind", default="tcp://127.0.0.1:0")
    serve.add_argument("--config", type=Path, help="cluster config YAML")
    serve.add_argument("--keys", help="CURVE keys directory (required off loopback)")
    _dashboard_options(serve)

    worker = verbs.add_parser("worker", help="operator: run this host's worker; or `list`")
    worker.add_argument("action", nargs="?", choices=["list"])
    worker.add_argument("--controller", help="controller address")
    worker.add_argument("--region", default="local")
    worker.add_argument("--attr", action="append", default=[], metavar="K=V")
    worker.add_argument("--work-dir", type=Path)
    worker.add_argument("--worker-id")
    worker.add_argument("--bind", default="tcp://127.0.0.1:0")
    worker.add_argument("--keys", help="CURVE keys directory")
    worker.add_argument("--token-file", type=Path,
                        help="the cluster token (the controller's STATE_DIR/cluster.token); on "
                        "the controller's own host it is found without this")
    worker.add_argument("--json", action="store_true")
    worker.add_argument("--preemption-notice", choices=["auto", "gce", "off"], default="auto",
                        help="watch the GCE metadata server (or $GCE_METADATA_HOST) for the "
                        "cloud's preemption notice; auto: only on a GCE machine")
    worker.add_argument("--exit-with-parent", action="store_true",
                        help="stop when the process that started this worker exits")

    actor = verbs.add_parser("actor", help="registered actors").add_subparsers(
        dest="action", required=True)
    listing = actor.add_parser("list", help="list registered actor names")
    listing.add_argument("--prefix", default="/")
    listing.add_argument("--json", action="store_true")

    jobs.add_parsers(verbs)
    operate.add_top_level(verbs, controller_sub)
    return parser


def _dashboard_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dashboard-port", type=int, default=None, metavar="PORT",
                        help="dashboard HTTP port (default 8265, or a free one if taken; "
                        "0: any free port)")
    parser.add_argument("--dashboard-host", default="127.0.0.1", metavar="HOST",
                        help="dashboard address (default loopback; any other needs "
                        "$IRIS_DASHBOARD_TOKEN)")


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(_hoist_global_options(list(sys.argv[1:] if argv is None
                                                           else argv)))
    handler = operate.run if operate.wanted(args) else \
        _HANDLERS[(args.verb, getattr(args, "action", None))]
    try:
        if handler in _CLIENT_VERBS:
            with iris.connect(args.address):
                return handler(args)
        return handler(args)
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


def _stop_event() -> threading.Event:
    from iris.worker.main import install_stop_signals

    stop = threading.Event()
    install_stop_signals(stop)
    return stop


def _cluster_start(args: argparse.Namespace) -> int:
    from iris.dashboard import launch

    with iris.local_cluster(workers=args.workers, bind=args.bind) as cluster:
        dashboard = launch(cluster.node, cluster.address, host=args.dashboard_host,
                           port=args.dashboard_port)
        try:
            print(f"cluster running at {cluster.address} with {args.workers} workers",
                  flush=True)
            print(f"  export IRIS_ADDRESS={cluster.address}", flush=True)
            print(f"  dashboard: {dashboard.url}  (kills need its token: "
                  f"{dashboard.login_url})", flush=True)
            _stop_event().wait()
        finally:
            dashboard.stop()
    return 0


def _controller_serve(args: argparse.Namespace) -> int:
    from iris.controller.main import run_controller

    cluster = None
    if args.config is not None:
        from iris.controller.config import load_config

        cluster = load_config(args.config)  # refuse a bad config before serving anything
    run_controller(args.state_dir, bind=args.bind, keys_dir=args.keys, stop=_stop_event(),
                   cluster=cluster, on_start=lambda node: _serve_dashboard(args, cluster, node))
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
    return dashboard.stop


def _worker(args: argparse.Namespace) -> int:
    if args.action == "list":
        with iris.connect(args.address or args.controller):
            return jobs.worker_list(args)
    from iris.worker.main import parse_attrs, run_worker

    controller = args.controller or args.address
    if not controller:
        raise SystemExit("iris worker: --controller ADDR is required")
    stop = _stop_event()
    if args.exit_with_parent:
        from iris.worker.main import stop_with_parent

        stop_with_parent(os.getppid(), stop)
    from iris.actors import tokens

    token = tokens.read(args.token_file) if args.token_file else None
    run_worker(controller, region=args.region, attrs=parse_attrs(args.attr),
               root=args.work_dir, worker_id=args.worker_id, bind=args.bind,
               keys_dir=args.keys, stop=stop, token=token,
               preemption_notice=args.preemption_notice)
    return 0


def _actor_list(args: argparse.Namespace) -> int:
    jobs.print_rows(iris.list_actors(args.prefix), ["name", "address", "owner"], args.json)
    return 0


_HANDLERS = {
    ("demo", None): _demo,
    ("keys", "generate"): _keys_generate,
    ("cluster", "start"): _cluster_start,
    ("cluster", "status"): jobs.cluster_status,
    ("controller", "serve"): _controller_serve,
    ("worker", None): _worker,
    ("worker", "list"): _worker,
    ("actor", "list"): _actor_list,
    ("job", "run"): jobs.job_run,
    ("job", "list"): jobs.job_list,
    ("job", "status"): jobs.job_status,
    ("job", "stop"): jobs.job_stop,
    ("job", "logs"): jobs.job_logs,
}
_CLIENT_VERBS = {jobs.cluster_status, _actor_list, jobs.job_run, jobs.job_list,
                 jobs.job_status, jobs.job_stop, jobs.job_logs}
