"""The arguments of the operator verbs (operate.py, slices.py) and of looking inside jobs
(inspect.py): which verbs and options exist, their help, and which parsed arguments are an
operator verb (`wanted`). No behaviour, and no import of the modules that act: building the
parser (every command does, `iris --help` too) stays as cheap as argparse itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from iris.wire.control import MAX_PROFILE_S

# A fresh controller VM boots (~30 s), installs Iris (~1 min with uv) and starts; 15 min
# covers a slow image pull or pip fallback before `start` gives up waiting.
START_TIMEOUT_S = 900.0
_CONTROLLER_ACTIONS = ("start", "stop", "restart", "status", "run-local")


def add_cluster_actions(cluster: Any) -> None:
    """stop, restart, controller, slice, vm under `iris cluster` (start/status exist)."""
    for name, text in (("stop", "stop every slice of every provider, then the controller "
                        "(its VM, or its process here); asks first"),
                       ("restart", "restart the controller, keeping its jobs")):
        p = leaf(cluster, name, text, f"iris cluster --config cluster.yaml {name}")
        _common(p, yes=name == "stop")
    _controller_actions(cluster.add_parser("controller", help="the controller alone"), False)
    add_slice_verbs(cluster.add_parser("slice", help="the cluster's slices"))
    add_vm_verbs(cluster.add_parser("vm", help="the cluster's VMs"))


def add_top_level(verbs: Any, controller_sub: Any) -> None:
    """`iris slice|vm ... --config F` and `iris controller start|... --config F`."""
    for action in _CONTROLLER_ACTIONS:
        _controller_action(controller_sub, action, with_config=True)
    for verb, add in (("slice", add_slice_verbs), ("vm", add_vm_verbs)):
        p = verbs.add_parser(verb, help=f"operator: the cluster's {verb}s (needs --config)")
        p.add_argument("--config", type=Path, help="cluster config YAML (here or after the "
                       "verb), e.g. cluster.yaml")
        add(p)


def _common(p: argparse.ArgumentParser, yes: bool = False) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--local", action="store_true", help="the controller runs on this "
                   "machine even if the config names a controller VM")
    p.add_argument("--timeout", type=float, default=START_TIMEOUT_S, metavar="SECONDS",
                   help=f"how long to wait for the controller to answer, e.g. 600 (default "
                   f"{START_TIMEOUT_S:.0f})")
    if yes:
        p.add_argument("--yes", action="store_true", help="do not ask before deleting")


def _controller_actions(parser: argparse.ArgumentParser, with_config: bool) -> None:
    sub = parser.add_subparsers(dest="controller_action", required=True)
    for action in _CONTROLLER_ACTIONS:
        _controller_action(sub, action, with_config)


def _controller_action(sub: Any, action: str, with_config: bool) -> None:
    p = leaf(sub, action, {
        "start": "start the controller (its VM, or a daemon here) and wait until it answers",
        "stop": "stop the controller (its VM, or its process here; cloud slices are left; "
                "asks first)",
        "restart": "restart the controller: it resumes from its state on disk",
        "status": "where the controller runs and whether it answers",
        "run-local": "run the controller and its autoscaler on this machine, in the "
                     "foreground"}[action],
        f"iris controller {action} --config cluster.yaml")
    if with_config:
        p.add_argument("--config", type=Path, required=True,
                       help="cluster config YAML, e.g. cluster.yaml")
    if action == "run-local":
        p.add_argument("--state-dir", type=Path, help="where jobs are kept, e.g. ./iris-state "
                       "(default: controller.state_dir, else ./iris-state)")
        p.add_argument("--bind", help="address to listen on, e.g. tcp://127.0.0.1:7100 "
                       "(default: controller.bind, else controller.address)")
        p.add_argument("--dashboard-port", type=int, default=None, metavar="PORT",
                       help="dashboard HTTP port, e.g. 8265 (default 8265)")
        p.add_argument("--dashboard-host", default="127.0.0.1", metavar="HOST",
                       help="dashboard address, e.g. 0.0.0.0 (default loopback; any other "
                       "needs $IRIS_DASHBOARD_TOKEN)")
    else:
        _common(p, yes=action == "stop")


def wanted(args: argparse.Namespace) -> bool:
    """Whether these parsed arguments are an operator verb of this module."""
    if args.verb in ("slice", "vm"):
        return True
    if args.verb == "controller":
        return args.action != "serve"
    if args.verb != "cluster" or (getattr(args, "local", False) and args.config is None):
        return False  # `iris cluster start --local`: an embedded cluster in the foreground
    if args.action in ("checkpoint", "checkpoints"):  # client verbs (checkpoints.py)
        return False
    return args.config is not None or args.action not in ("status",)


def leaf(sub: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    """A verb's parser whose --help ends with an example (as every verb's does)."""
    return sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".",
                          epilog=f"example: {example}",
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_slice_verbs(parent: Any) -> None:
    """`slice create|list|get|terminate` under `parent` (a subparsers object)."""
    sub = parent.add_subparsers(dest="slice_action", required=True)
    create = leaf(sub, "create", "make one slice of a scale group now",
                  "iris slice create --scale-group v5e-16 --config cluster.yaml")
    create.add_argument("--scale-group", required=True, metavar="G",
                        help="the scale group to make it in, e.g. v5e-16")
    create.add_argument("--zone", help="the zone, e.g. us-central2-b (default: the group's "
                        "zones, in order)")
    listing = leaf(sub, "list", "the cluster's slices", "iris slice list --json")
    listing.add_argument("--scale-group", metavar="G",
                         help="only this scale group's slices, e.g. v5e-16")
    get = leaf(sub, "get", "one slice", "iris slice get v5e-16-abc123")
    get.add_argument("slice_id", help="the slice, e.g. v5e-16-abc123 (see slice list)")
    term = leaf(sub, "terminate", "delete slices (asks first)",
                "iris slice terminate --all --yes")
    term.add_argument("slice_ids", nargs="*", metavar="SLICE_ID",
                      help="slices to delete, e.g. v5e-16-abc123 (or --all)")
    term.add_argument("--all", action="store_true", help="every slice of the cluster")
    term.add_argument("--yes", action="store_true", help="do not ask before deleting")
    for p in (create, listing, get, term):
        _leaf_options(p)


def add_vm_verbs(parent: Any) -> None:
    sub = parent.add_subparsers(dest="vm_action", required=True)
    _leaf_options(leaf(sub, "status", "every VM: the controller's and each host",
                       "iris vm status --config cluster.yaml"))
    get = leaf(sub, "get", "one VM", "iris vm get v5e-16-abc123-h0")
    logs = leaf(sub, "logs", "a host's task output from the log store, or the controller "
                "VM's serial console", "iris vm logs v5e-16-abc123-h0")
    for p in (get, logs):
        p.add_argument("vm_id", help="the VM, e.g. v5e-16-abc123-h0 (see vm status)")
        _leaf_options(p)


def _leaf_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    # Also after the verb (`iris slice list --config F`); SUPPRESS keeps an earlier one.
    p.add_argument("--config", type=Path, default=argparse.SUPPRESS,
                   help="cluster config YAML, e.g. cluster.yaml")


# ------------------------------------------------------------ looking inside jobs

_JSON_TEXT_HELP = "print the result as one JSON document instead of text"
TASK_HELP = ("the task: JOB/N for task N of JOB (its id, a unique prefix, or a name relative "
              "to you), or JOB for task 0, e.g. train/1")
FORMATS = {"speedscope": "speedscope.json", "svg": "svg", "folded": "folded.txt"}


def add_job_actions(actions) -> None:
    summary = actions.add_parser(
        "summary", help="per task and attempt: waits, run time, exit, CPU, peak memory "
        "against the request, chip-hours, retries; the job's totals",
        description="What each task and attempt of a job waited, ran and used, and why it "
        "was retried; the job's totals and events (exec into its tasks).",
        epilog="example: iris job summary train --json")
    summary.add_argument("job_id", metavar="JOB", help="the job: its id, a unique prefix of "
                         "it, or a name relative to you, e.g. train")
    summary.add_argument("--json", action="store_true", help=_JSON_TEXT_HELP)
    url = actions.add_parser(
        "url", help="the address of a task's named port (Resources(ports=[...]), "
        "iris job run --port NAME)",
        description="Print where a task of a job listens for one of its named ports.",
        epilog="example: iris job url train http --task 0")
    url.add_argument("job_id", metavar="JOB", help="the job, e.g. train")
    url.add_argument("port", metavar="PORT", help="the port's name, e.g. http")
    url.add_argument("--task", type=int, default=0, metavar="N",
                     help="which task's port, e.g. 1 (default 0)")
    url.add_argument("--json", action="store_true", help=_JSON_TEXT_HELP)


def add_task_verb(verbs) -> None:
    task = verbs.add_parser("task", help="look inside a live task: its stacks, a profile, "
                            "a command in its environment")
    actions = task.add_subparsers(dest="action", required=True, metavar="ACTION")
    stack = actions.add_parser(
        "stack", help="print every thread's Python stack of the task's processes",
        description="Print every thread's Python stack of each process of a running task "
        "(py-spy dump on its worker).", epilog="example: iris task stack train/0")
    stack.add_argument("task", metavar="JOB[/TASK]", help=TASK_HELP)
    stack.add_argument("--json", action="store_true", help=_JSON_TEXT_HELP)
    profile = actions.add_parser(
        "profile", help="record a sampling profile of a running task and write it here",
        description="Sample a running task's Python stacks (its subprocesses too) for "
        "SECONDS and write the profile to a local file: speedscope JSON (open it at "
        "https://www.speedscope.app), an SVG flame graph, or folded stacks.",
        epilog="example: iris task profile train/0 --seconds 30 --format svg")
    profile.add_argument("task", metavar="JOB[/TASK]", help=TASK_HELP)
    profile.add_argument("--seconds", type=float, default=10.0, metavar="S",
                         help=f"how long to sample, e.g. 30 (default 10; at most "
                         f"{MAX_PROFILE_S:g})")
    profile.add_argument("--rate", type=int, default=100, metavar="HZ",
                         help="samples a second, e.g. 200 (default 100)")
    profile.add_argument("--format", choices=sorted(FORMATS), default="speedscope",
                         help="speedscope (JSON), svg (a flame graph) or folded (one "
                         "stack and count a line), e.g. svg (default speedscope)")
    profile.add_argument("--output", "-o", type=Path, metavar="FILE",
                         help="where to write it, e.g. prof.svg (default: "
                         "profile-JOB-TASK.<format> here)")
    profile.add_argument("--json", action="store_true",
                         help="print what was written (path, samples, note) as JSON")
    run = actions.add_parser(
        "exec", help="run a command in a running task's environment on its host",
        description="Run a command on a running task's host, in its environment: its venv, "
        "working directory, environment variables and memory cgroup. Output streams back; "
        "the exit code is the command's. For the job's owner, or an operator with the "
        "admin token; each use is recorded in the job's events (iris job summary).",
        epilog="example: iris task exec train/0 -- python -c 'import sys; print(sys.prefix)'")
    run.add_argument("task", metavar="JOB[/TASK]", help=TASK_HELP)
    run.add_argument("--admin-token-file", type=Path, metavar="FILE",
                     help="operators: the controller's admin token, to exec into anyone's "
                     "job, e.g. /var/lib/iris/admin.token")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                     help="the command and its arguments, after --, e.g. -- ls -la")
