"""The `iris` command's arguments: every verb, every option, its help. No behaviour.

Each option's help says what it is, its unit and its default, and gives an example, because
`iris <verb> --help` is where a newcomer looks first. tests/cli/test_cli_help.py checks that
no option is left without one.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

import iris
from iris.cli import one_verb, parser_ops
from iris.cli.parser_types import Parser, dir_path, port
from iris.wire.states import PRIORITIES

DESCRIPTION = """\
Iris runs Python jobs and actors on a cluster: your laptop, or TPU and GPU hosts in several
cloud regions.

First steps:
  iris cluster start --local                 start a cluster on this machine (keep it open)
  export IRIS_ADDRESS=tcp://127.0.0.1:PORT   the address it printed
  iris job run -- python -c 'print("hi")'    run a command as a job and stream its output
  iris job list                              jobs and their states
  iris job logs -f NAME                      follow a job's output (NAME: id, prefix or name)
"""

EPILOG = """\
Client verbs find the cluster with --address (before or after the verb) or $IRIS_ADDRESS.
Listings take --json. Times are wall-clock: epoch seconds in JSON, ISO-8601 when printed.
Shell completion: source <(iris completion bash)   (or zsh)
More: iris VERB --help, e.g. iris job run --help"""

_ADDRESS_HELP = ("the cluster's address, e.g. tcp://127.0.0.1:5555 (default: $IRIS_ADDRESS); "
                 "accepted before or after the verb")
_JSON_HELP = "print the result as one JSON document instead of a table"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of examples; descriptions are filled to 88 columns first."""


def _fill(text: str) -> str:
    return textwrap.fill(text, 88)


_RAW = _Formatter


class _Version(argparse.Action):
    """`--version`: reads the installed version (importlib.metadata, ~40 ms) only when asked,
    not in every command."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"iris {iris.__version__}")
        parser.exit()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the command line, only its verb's options are filled in (the
    others are there, with their help, but empty): argparse builds ~300 options in ~10-20 ms
    and each command parses one verb."""
    parser = Parser(prog="iris", description=DESCRIPTION, epilog=EPILOG, formatter_class=_RAW)
    parser.add_argument("--address", metavar="ADDR", help=_ADDRESS_HELP)
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print the version of Iris and exit")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    if argv is not None:
        verbs = one_verb.only(verbs, argv)
    _cluster(verbs)
    _job(verbs)
    parser_ops.add_task_verb(verbs)
    _actor(verbs)
    _worker(verbs)
    _user(verbs)
    parser_ops.add_top_level(verbs, _controller(verbs))
    _keys(verbs)
    _demo(verbs)
    completion = verbs.add_parser(
        "completion", help="print a shell completion script",
        description="Print a completion script for bash or zsh.", formatter_class=_RAW,
        epilog="example: source <(iris completion bash)   (add it to ~/.bashrc to keep it)")
    completion.add_argument("shell", choices=["bash", "zsh"],
                            help="the shell to complete in, e.g. bash")
    return parser


def _sub(verbs, name: str, help: str, example: str, description: str | None = None):
    return verbs.add_parser(name, help=help, description=_fill(description or help[:1].upper()
                            + help[1:] + "."), epilog=f"example: {example}",
                            formatter_class=_RAW)


def _cluster(verbs) -> None:
    cluster = verbs.add_parser("cluster", help="start a local cluster, or operate one from its "
                               "config file; see one at a glance")
    cluster.add_argument("--config", type=Path, metavar="FILE",
                         help="cluster config YAML: operate the GCP cluster it describes "
                         "(start, stop, slice, vm...), e.g. --config cluster.yaml")
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = _sub(actions, "start", "--local: run a cluster on this machine in the foreground "
                 "(Ctrl-C stops it); --config F: start the config's controller (its VM, or "
                 "a daemon on this machine when it names none) and wait until it answers",
                 "iris cluster start --local --workers 2 --cpu 1")
    start.add_argument("--local", action="store_true",
                       help="the cluster runs here: without --config, controller in this "
                       "process and workers as child processes, in the foreground; with "
                       "--config F, the config's controller as a daemon on this machine")
    start.add_argument("--json", action="store_true", help=_JSON_HELP)
    start.add_argument("--timeout", type=float, default=parser_ops.START_TIMEOUT_S,
                       metavar="SECONDS", help="with --config: how long to wait for the "
                       f"controller to answer, e.g. 900 (default {parser_ops.START_TIMEOUT_S:g})")
    start.add_argument("--workers", type=int, default=2, metavar="N",
                       help="worker processes to start, e.g. 2 (default 2)")
    start.add_argument("--cpu", type=float, default=None, metavar="CPUS",
                       help="CPUs each worker offers, e.g. 4 (default: this machine's CPUs "
                       "shared between the workers)")
    start.add_argument("--memory", default=None, metavar="SIZE",
                       help="memory each worker offers, e.g. 8GiB (default: this machine's "
                       "memory shared between the workers)")
    start.add_argument("--bind", default="tcp://127.0.0.1:0", metavar="ADDR",
                       help="address the controller listens on, e.g. tcp://127.0.0.1:5555 "
                       "(default: a free loopback port)")
    dashboard_options(start)
    status = _sub(actions, "status", "workers, jobs by state and scale groups at a glance "
                  "(--config F: also where its controller runs)", "iris cluster status --json")
    status.add_argument("--json", action="store_true", help=_JSON_HELP)
    status.add_argument("--local", action="store_true",
                        help="with --config: the controller runs on this machine even if the "
                        "config names a controller VM")
    take = _sub(actions, "checkpoint", "take a checkpoint of the controller's state in GCS "
                "now; prints its name and size", "iris cluster checkpoint --json")
    take.add_argument("--json", action="store_true", help=_JSON_HELP)
    listing = _sub(actions, "checkpoints", "list the controller's checkpoints in GCS (time, "
                   "size, job counts), oldest first", "iris cluster checkpoints --json")
    listing.add_argument("--json", action="store_true", help=_JSON_HELP)
    parser_ops.add_cluster_actions(actions)


def _job(verbs) -> None:
    job = verbs.add_parser("job", help="run, list, follow and stop jobs")
    actions = job.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run", help="run a command as a job and stream its output: iris job run -- CMD ...",
        description=_fill("Run a command as a job, stream its output, then print its final "
                          "state; exit 0 only if it succeeded. Ctrl-C asks whether to stop "
                          "the job."), formatter_class=_RAW,
        epilog="examples:\n  iris job run -- python -c 'print(42)'\n"
        "  iris job run --cpu 2 --memory 4GiB --replicas 2 -- python train.py --lr 0.1\n"
        "  iris job run --tpu v5litepod-16 --pip jax[tpu] -- python train.py\n"
        "  iris job run --tpu v5litepod-16 --count 2 -- python train.py   # 2 slices\n"
        "  iris job run --gpu H100 --count 8 --hosts 4 -- python ddp.py")
    run.add_argument("--name", metavar="NAME",
                     help="job name, e.g. train (default: the command's name plus a suffix)")
    run.add_argument("--replicas", type=int, default=1, metavar="N",
                     help="how many copies (tasks) of the command to run, e.g. 4 (default 1)")
    run.add_argument("--cpu", type=float, default=1.0, metavar="CPUS",
                     help="CPUs per task, may be fractional, e.g. 0.5 or 4 (default 1)")
    run.add_argument("--memory", default=0, metavar="SIZE",
                     help="memory per task, in bytes or with a unit, e.g. 512MiB, 4GiB, 16GB "
                     "(default: none reserved, no limit)")
    run.add_argument("--tpu", metavar="TYPE", help="a TPU slice per task, e.g. v5litepod-16; "
                     "fallbacks preferred first, comma-separated, e.g. v6e-4,v5litepod-4")
    run.add_argument("--existing-capacity-only", action="store_true",
                     help="run only on hosts already up: wait for them rather than have the "
                     "autoscaler add any, e.g. --tpu v6e-16 --existing-capacity-only")
    run.add_argument("--gpu", metavar="TYPE", help="a GPU type per task, e.g. H100")
    run.add_argument("--count", type=int, default=1, metavar="N",
                     help="whole TPU slices per gang (multi-slice), or GPUs per task, e.g. "
                     "--tpu v5litepod-16 --count 2 (default 1)")
    run.add_argument("--hosts", type=int, default=1, metavar="N",
                     help="hosts of a GPU gang, one task each, placed in one pool, e.g. "
                     "--gpu H100 --count 8 --hosts 4 (default 1: not a gang)")
    run.add_argument("--priority", choices=PRIORITIES,
                     help="priority band, e.g. batch (default interactive); higher bands may "
                     "preempt lower ones")
    run.add_argument("--checkpoint-every", type=float, metavar="SECONDS",
                     help="how often the job checkpoints, if it does, e.g. 1800; eviction "
                     "for higher bands then takes what loses the least work (default unknown)")
    run.add_argument("--port", action="append", default=[], metavar="NAME",
                     help="a named port each task listens on: its worker gives it a free "
                     "port, the task reads $IRIS_PORT_<NAME>, `iris job url JOB NAME` prints "
                     "it, e.g. --port http (repeatable)")
    run.add_argument("--env", action="append", default=[], metavar="K=V",
                     help="an environment variable for the tasks, e.g. --env SEED=1 "
                     "(repeatable)")
    run.add_argument("--pip", action="append", default=[], metavar="REQ",
                     help="a requirement for the job's own environment, e.g. numpy>=1.26 "
                     "(repeatable)")
    run.add_argument("--no-wait", action="store_true",
                     help="print the job id and return at once; follow it later with "
                     "iris job logs -f ID")
    run.add_argument("--dry-run", action="store_true",
                     help="submit nothing: say whether it would fit now, and where")
    run.add_argument("--durable", action="store_true",
                     help="return (or start following) only once the job is in a checkpoint "
                     "in GCS, so it survives the loss of the controller's machine, e.g. "
                     "--durable --no-wait (needs storage.snapshot_bucket)")
    run.add_argument("--detach-on-interrupt", action="store_true",
                     help="on Ctrl-C leave the job running (default: ask, or stop it when "
                     "not on a terminal)")
    run.add_argument("--timestamps", action="store_true",
                     help="prefix each output line with its time (ISO-8601, UTC)")
    run.add_argument("--json", action="store_true",
                     help="print the final status as JSON, alone on stdout (the job's "
                     "output goes to stderr then; with --no-wait: the job id)")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                     help="the command and its arguments, after --, e.g. -- python train.py")
    _job_listings(actions)


def _job_listings(actions) -> None:
    job_id_help = ("the job: its id (/alice/train-3f2a1c), a unique prefix of it, or a name "
                   "relative to you, e.g. train")
    listing = _sub(actions, "list", "list jobs, newest first", "iris job list --active")
    listing.add_argument("--prefix", metavar="PATH",
                         help="only jobs whose id starts with this, e.g. /alice/train")
    listing.add_argument("--active", action="store_true", help="hide finished jobs")
    listing.add_argument("--json", action="store_true", help=_JSON_HELP)
    status = _sub(actions, "status", "one job's state, tasks, attempts and why it is pending",
                  "iris job status train")
    status.add_argument("job_id", metavar="JOB", help=job_id_help)
    status.add_argument("--json", action="store_true", help=_JSON_HELP)
    stop = _sub(actions, "stop", "kill a job and its sub-jobs", "iris job stop train")
    stop.add_argument("job_id", metavar="JOB", nargs="?", help=job_id_help)
    stop.add_argument("--prefix", metavar="PATH",
                      help="kill every live job whose id starts with this, e.g. /alice/sweep-")
    stop.add_argument("--json", action="store_true", help="print the killed ids as JSON")
    logs = actions.add_parser(
        "logs", help="a job's output: stdout and stderr in the order written",
        description=_fill("Print a job's output from the log store (it outlives the "
                          "workers): stdout and stderr of every task merged in the order "
                          "written; stderr lines say so."),
        formatter_class=_RAW,
        epilog="examples:\n  iris job logs -f train\n  iris job logs train --task 0 --timestamps "
        "--grep 'loss='\n  iris job logs train --build-logs     (the environment build: uv)")
    logs.add_argument("job_id", metavar="JOB", help=job_id_help)
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new lines until the job ends")
    logs.add_argument("--task", type=int, metavar="N", help="only task N, e.g. 0")
    logs.add_argument("--since", type=float, metavar="EPOCH_S",
                      help="only lines at or after this wall-clock time, in epoch seconds, "
                      "e.g. 1767225600")
    logs.add_argument("--grep", metavar="REGEX",
                      help="only lines matching this regular expression, e.g. 'loss=|ERROR'")
    logs.add_argument("--timestamps", action="store_true",
                      help="prefix each line with its time (ISO-8601, UTC)")
    logs.add_argument("--build-logs", action="store_true",
                      help="show the environment build's output (uv) instead of the task's")
    logs.add_argument("--json", action="store_true",
                      help="one JSON object per line: ts (epoch s), time (ISO-8601), stream, "
                      "task, attempt, text")
    parser_ops.add_job_actions(actions)


def _actor(verbs) -> None:
    actor = verbs.add_parser("actor", help="list registered actors")
    actions = actor.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = _sub(actions, "list", "list the actors registered by users' jobs and clients",
                   "iris actor list --prefix /alice/")
    listing.add_argument("--prefix", default="/", metavar="PATH",
                         help="only names under this path, e.g. /alice/ (default /)")
    listing.add_argument("--all", action="store_true",
                         help="also Iris's own (/iris/...) entries")
    listing.add_argument("--json", action="store_true",
                         help=_JSON_HELP + "; times are epoch seconds")


def _worker(verbs) -> None:
    worker = verbs.add_parser(
        "worker", help="list workers, drain or revoke one, or (operators) run this host's worker",
        description=_fill("`iris worker list` lists the workers; `iris worker drain ID` tells "
                          "one to leave as on SIGTERM (it hands its tasks back, says goodbye "
                          "and stops; operators); `iris worker revoke ID` revokes a worker's "
                          "credential at once and bars its id from joining again (a host "
                          "you no longer trust; operators); `iris worker --controller ADDR` runs this "
                          "host's worker in the foreground (operators)."), formatter_class=_RAW,
        epilog="examples:\n  iris worker list --json\n"
        "  iris worker drain w-3f2a1c --admin-token-file /var/lib/iris/admin.token\n"
        "  iris worker revoke w-3f2a1c --admin-token-file /var/lib/iris/admin.token\n"
        "  iris worker --controller tcp://10.0.0.2:5555 --region us-central1 --attr zone=a")
    worker.add_argument("action", nargs="?", choices=["list", "drain", "revoke"],
                        help="list: print the cluster's workers, e.g. iris worker list; "
                        "drain ID: tell worker ID to leave, e.g. iris worker drain w-3f2a1c; "
                        "revoke ID: refuse worker ID from now on, e.g. iris worker revoke "
                        "w-3f2a1c")
    worker.add_argument("target", nargs="?", metavar="ID",
                        help="with drain or revoke: the worker, e.g. w-3f2a1c (see iris "
                        "worker list)")
    worker.add_argument("--admin-token-file", type=Path, metavar="FILE",
                        help="with drain or revoke: the controller's admin token, e.g. "
                        "/var/lib/iris/admin.token (default: $IRIS_ADMIN_TOKEN_FILE, or hex "
                        "in $IRIS_ADMIN_TOKEN)")
    worker.add_argument("--no-wait", action="store_true",
                        help="with drain: return once the worker is told, without waiting "
                        "for it to leave")
    worker.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help="with drain: how long to wait for the worker to leave, e.g. 60 "
                        "(default 120; its tasks get their stop grace, 10 s by default)")
    worker.add_argument("--controller", metavar="ADDR",
                        help="the controller's address, e.g. tcp://10.0.0.2:5555")
    worker.add_argument("--region", default="local", metavar="REGION",
                        help="the region this host is in, e.g. us-central1 (default local)")
    worker.add_argument("--attr", action="append", default=[], metavar="K=V",
                        help="an attribute to advertise, e.g. --attr zone=us-central1-a or "
                        "--attr cpu=8 (repeatable)")
    worker.add_argument("--work-dir", type=dir_path, metavar="DIR",
                        help="where attempts, environments and bundles live, e.g. /var/lib/iris "
                        "(one worker per directory)")
    worker.add_argument("--env-cache", type=dir_path, metavar="DIR",
                        help="where task environments (uv venvs) live, shared by every worker "
                        "on this machine, e.g. /var/cache/iris-envs (default: $IRIS_ENV_CACHE, "
                        "else WORK_DIR/envs)")
    worker.add_argument("--worker-id", metavar="ID",
                        help="this worker's id, e.g. host-7 (default: the host name)")
    worker.add_argument("--bind", default="tcp://127.0.0.1:0", metavar="ADDR",
                        help="address to listen on, e.g. tcp://0.0.0.0:5556 (default: a free "
                        "loopback port)")
    worker.add_argument("--keys", metavar="DIR",
                        help="CURVE keys directory, e.g. ./keys (required off loopback)")
    worker.add_argument("--token-file", type=Path, metavar="FILE",
                        help="the cluster token, e.g. /etc/iris/cluster.token (the "
                        "controller's STATE_DIR/cluster.token; found without this on the "
                        "controller's own host)")
    worker.add_argument("--json", action="store_true", help=_JSON_HELP + " (with list)")
    worker.add_argument("--warm", action="store_true",
                        help="start the default task environment's zygote at once, so the "
                        "first task does not wait for an interpreter (autoscaled hosts)")
    worker.add_argument("--exit-with-parent", action="store_true",
                        help="stop when the process that started this worker exits")
    worker.add_argument("--preemption-notice", choices=["auto", "gce", "slurm", "off"],
                        default="auto",
                        help="where the machine's end is announced: gce watches the metadata "
                        "server (or $GCE_METADATA_HOST); slurm reads the job step's SIGTERM "
                        "as the notice; auto: slurm inside a Slurm job, gce on a GCE "
                        "machine, e.g. --preemption-notice off")


def _user(verbs) -> None:
    user = verbs.add_parser("user", help="per-user budgets and usage (setting one: operators)")
    actions = user.add_subparsers(dest="action", required=True, metavar="ACTION")
    budget = actions.add_parser(
        "budget", help="accelerator-hour budgets and priority caps of users and groups",
        description=_fill("A budget limits the accelerator-hours a user (or a group of users) "
                          "spends over a rolling window; over it, their pending work is "
                          "scheduled as batch. Its priority cap refuses submissions above a "
                          "band. Setting one needs the controller's admin token."),
        formatter_class=_RAW,
        epilog="examples:\n  iris user budget set alice --hours 800 --max-priority interactive"
        " --admin-token-file /var/lib/iris/admin.token\n"
        "  iris user budget set group:ml --members alice,bob --hours 5000\n"
        "  iris user budget get alice --json\n  iris user budget list")
    which = budget.add_subparsers(dest="budget_action", required=True, metavar="ACTION")
    subject_help = "a user, e.g. alice, or a group, e.g. group:ml"
    put = _sub(which, "set", "set (or --clear) a user's or group's budget (operators)",
               "iris user budget set alice --hours 800 --window-days 7 --max-priority "
               "interactive")
    put.add_argument("subject", metavar="SUBJECT", help=subject_help)
    put.add_argument("--hours", type=float, metavar="H",
                     help="accelerator-hours (chips or GPUs x hours) per window, e.g. 800 "
                     "(default: no limit on hours)")
    put.add_argument("--window-days", type=float, default=7.0, metavar="DAYS",
                     help="the rolling window usage is counted over, e.g. 7 (default 7; at "
                     "most the controller's retention)")
    put.add_argument("--max-priority", choices=PRIORITIES,
                     help="the highest band its jobs may be submitted at, e.g. interactive "
                     "(default: any)")
    put.add_argument("--members", metavar="USERS",
                     help="a group's users, comma-separated, e.g. alice,bob")
    put.add_argument("--clear", action="store_true",
                     help="remove the budget instead, e.g. iris user budget set alice --clear")
    put.add_argument("--admin-token-file", type=Path, metavar="FILE",
                     help="the controller's admin token, e.g. /var/lib/iris/admin.token "
                     "(default: $IRIS_ADMIN_TOKEN_FILE, or hex in $IRIS_ADMIN_TOKEN)")
    put.add_argument("--json", action="store_true", help=_JSON_HELP)
    get = _sub(which, "get", "one budget and what it has spent", "iris user budget get alice")
    get.add_argument("subject", metavar="SUBJECT", help=subject_help)
    get.add_argument("--json", action="store_true", help=_JSON_HELP)
    listing = _sub(which, "list", "every budget, and every user's accelerator-hours over the "
                   "last 7 days", "iris user budget list --json")
    listing.add_argument("--json", action="store_true", help=_JSON_HELP)


def _controller(verbs) -> Any:
    controller = verbs.add_parser("controller", help="operators: run the controller")
    actions = controller.add_subparsers(dest="action", required=True, metavar="ACTION")
    serve = _sub(actions, "serve", "run the controller (and registry) in the foreground",
                 "iris controller serve --state-dir /var/lib/iris --bind tcp://0.0.0.0:5555 "
                 "--keys ./keys --config cluster.yaml")
    serve.add_argument("--state-dir", required=True, type=dir_path, metavar="DIR",
                       help="where jobs are kept (SQLite), e.g. /var/lib/iris; a restart on "
                       "the same directory loses nothing")
    serve.add_argument("--bind", default="tcp://127.0.0.1:0", metavar="ADDR",
                       help="address to listen on, e.g. tcp://0.0.0.0:5555 (default: a free "
                       "loopback port)")
    serve.add_argument("--config", type=Path, metavar="FILE",
                       help="cluster config YAML (regions, scale groups), e.g. cluster.yaml")
    serve.add_argument("--keys", metavar="DIR",
                       help="CURVE keys directory, e.g. ./keys (required off loopback)")
    origin = serve.add_mutually_exclusive_group()
    origin.add_argument("--restore", metavar="CHECKPOINT",
                        help="restore this checkpoint (a name from `iris cluster checkpoints`, "
                        "or 'latest') before serving, even over a local job store, which is "
                        "moved aside, e.g. --restore latest. Default: restore the newest only "
                        "into an empty state dir")
    origin.add_argument("--no-restore", action="store_true",
                        help="never restore: use the local job store, or start empty")
    serve.add_argument("--take-over", action="store_true",
                       help="claim the config's checkpoint prefix even though another live "
                       "controller owns it; that one stops on its next lease renewal (within "
                       "20 s), e.g. when moving the controller to a new VM while the old one "
                       "still runs")
    serve.add_argument("--report-fronts", type=int, default=0, metavar="K",
                       help="K helper processes that take the workers' reports off the "
                       "controller's socket (docs/architecture.md, Report fronts), e.g. 2 "
                       "past ~10,000 hosts (default 0: the controller takes them)")
    dashboard_options(serve)
    return actions


def _keys(verbs) -> None:
    keys = verbs.add_parser("keys", help="CURVE cluster keys")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    generate = _sub(actions, "generate", "create a cluster keypair in DIR",
                    "iris keys generate ./keys")
    generate.add_argument("dir", metavar="DIR",
                          help="directory to create, e.g. ./keys (refuses to overwrite)")
    generate.add_argument("--json", action="store_true", help=_JSON_HELP)


def _demo(verbs) -> None:
    demo = _sub(verbs, "demo", "run the RL trainer/rollout demo on a local cluster",
                "iris demo --rollouts 2 --iterations 3")
    demo.add_argument("--rollouts", type=int, default=3, metavar="N",
                      help="rollout tasks, e.g. 2 (default 3)")
    demo.add_argument("--iterations", type=int, default=4, metavar="K",
                      help="weight pulls and rollout pushes per task, e.g. 3 (default 4)")
    demo.add_argument("--weights", default="4MiB", metavar="SIZE",
                      help="weights published per training step, e.g. 256MiB (default 4MiB)")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")


def dashboard_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dashboard-port", type=port, default=None, metavar="PORT",
                        help="dashboard HTTP port, e.g. 8265 (default 8265, or a free one "
                        "if another process holds it, which is reported; a taken port given "
                        "here is an error; 0: any free port)")
    parser.add_argument("--dashboard-host", default="127.0.0.1", metavar="HOST",
                        help="dashboard address, e.g. 0.0.0.0 (default 127.0.0.1; any other "
                        "needs $IRIS_DASHBOARD_TOKEN)")
