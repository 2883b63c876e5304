"""`iris job summary|url` and `iris task stack|profile|exec`: looking inside a job. Their
arguments (`add_job_actions`, `add_task_verb`) and their printing; the calls are the
client's (client/inspect.py).

A task is named `JOB/N` (task N of JOB: its id, a unique prefix, or a name relative to
you) or `JOB` alone (task 0). Errors name what is wrong and exit 2 (main.py); `--json`
prints the answer as one JSON document.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from iris.base.errors import InvalidRequestError, NotFoundError
from iris.base.resources import human_bytes
from iris.cli import flame
from iris.cli.jobs import iso, print_rows, resolve_job
from iris.client import inspect
from iris.wire.control import MAX_PROFILE_S

_JSON_HELP = "print the result as one JSON document instead of text"
_TASK_HELP = ("the task: JOB/N for task N of JOB (its id, a unique prefix, or a name relative "
              "to you), or JOB for task 0, e.g. train/1")
_FORMATS = {"speedscope": "speedscope.json", "svg": "svg", "folded": "folded.txt"}


# ------------------------------------------------------------ arguments


def add_job_actions(actions) -> None:
    summary = actions.add_parser(
        "summary", help="per task and attempt: waits, run time, exit, CPU, peak memory "
        "against the request, chip-hours, retries; the job's totals",
        description="What each task and attempt of a job waited, ran and used, and why it "
        "was retried; the job's totals and events (exec into its tasks).",
        epilog="example: iris job summary train --json")
    summary.add_argument("job_id", metavar="JOB", help="the job: its id, a unique prefix of "
                         "it, or a name relative to you, e.g. train")
    summary.add_argument("--json", action="store_true", help=_JSON_HELP)
    url = actions.add_parser(
        "url", help="the address of a task's named port (Resources(ports=[...]), "
        "iris job run --port NAME)",
        description="Print where a task of a job listens for one of its named ports.",
        epilog="example: iris job url train http --task 0")
    url.add_argument("job_id", metavar="JOB", help="the job, e.g. train")
    url.add_argument("port", metavar="PORT", help="the port's name, e.g. http")
    url.add_argument("--task", type=int, default=0, metavar="N",
                     help="which task's port, e.g. 1 (default 0)")
    url.add_argument("--json", action="store_true", help=_JSON_HELP)


def add_task_verb(verbs) -> None:
    task = verbs.add_parser("task", help="look inside a live task: its stacks, a profile, "
                            "a command in its environment")
    actions = task.add_subparsers(dest="action", required=True, metavar="ACTION")
    stack = actions.add_parser(
        "stack", help="print every thread's Python stack of the task's processes",
        description="Print every thread's Python stack of each process of a running task "
        "(py-spy dump on its worker).", epilog="example: iris task stack train/0")
    stack.add_argument("task", metavar="JOB[/TASK]", help=_TASK_HELP)
    stack.add_argument("--json", action="store_true", help=_JSON_HELP)
    profile = actions.add_parser(
        "profile", help="record a sampling profile of a running task and write it here",
        description="Sample a running task's Python stacks (its subprocesses too) for "
        "SECONDS and write the profile to a local file: speedscope JSON (open it at "
        "https://www.speedscope.app), an SVG flame graph, or folded stacks.",
        epilog="example: iris task profile train/0 --seconds 30 --format svg")
    profile.add_argument("task", metavar="JOB[/TASK]", help=_TASK_HELP)
    profile.add_argument("--seconds", type=float, default=10.0, metavar="S",
                         help=f"how long to sample, e.g. 30 (default 10; at most "
                         f"{MAX_PROFILE_S:g})")
    profile.add_argument("--rate", type=int, default=100, metavar="HZ",
                         help="samples a second, e.g. 200 (default 100)")
    profile.add_argument("--format", choices=sorted(_FORMATS), default="speedscope",
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
    run.add_argument("task", metavar="JOB[/TASK]", help=_TASK_HELP)
    run.add_argument("--admin-token-file", type=Path, metavar="FILE",
                     help="operators: the controller's admin token, to exec into anyone's "
                     "job, e.g. /var/lib/iris/admin.token")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                     help="the command and its arguments, after --, e.g. -- ls -la")


# ------------------------------------------------------------ handlers


def task_of(given: str) -> tuple[str, int]:
    """`train/1` -> (the job `train` names, 1); `train` -> (its job, 0)."""
    head, _, last = given.rstrip("/").rpartition("/")
    if head and re.fullmatch(r"\d{1,7}", last):
        try:
            return resolve_job(head), int(last)
        except NotFoundError:
            pass  # a job whose own name ends in digits, e.g. /alice/sweep/7
    return resolve_job(given), 0


def job_summary(args: argparse.Namespace) -> int:
    answer = inspect.job_summary(resolve_job(args.job_id))
    if args.json:
        print(json.dumps(answer))
        return 0
    print_summary(answer)
    return 0


def print_summary(s: dict) -> None:
    req = s["request"]
    asked = f"cpu {req['cpu']:g}" + (f", memory {human_bytes(req['memory_bytes'])}"
                                     if req["memory_bytes"] else ", no memory asked")
    print(f"{s['job_id']}  {s['state']}  (asked per task: {asked})")
    rows = []
    for task in s["tasks"]:
        for a in task["attempts"]:
            rows.append({
                "task": task["index"], "attempt": a["number"], "worker": a["worker_id"],
                "queued": _secs(a["queue_s"]), "starting": _secs(a["start_s"]),
                "ran": _secs(a["run_s"]), "ended": a["ended"],
                "cpu_s": _num(a["cpu_s"]), "cores": _num(a["mean_cores"]),
                "peak_rss": _peak(a), "chip_h": _num(a["chip_hours"]) if a["chips"] else "",
                "retried_because": a["retried_because"] or ""})
    print_rows(rows, ["task", "attempt", "worker", "queued", "starting", "ran", "ended",
                      "cpu_s", "cores",
                      "peak_rss", "chip_h", "retried_because"], False)
    t = s["totals"]
    print(f"totals: {t['attempts']} attempts, {t['retries']} retries, cpu "
          f"{_num(t['cpu_s']) or '-'} s, run {_secs(t['run_s'])}, peak RSS "
          f"{human_bytes(t['peak_rss_bytes']) if t['peak_rss_bytes'] else '-'}, "
          f"{t['chip_hours']:g} chip-hours" + (f", {t['killed_for_memory']} killed for memory"
                                               if t["killed_for_memory"] else ""))
    for event in s["events"]:
        who = event["user"] + (" (operator)" if event.get("operator") else "")
        print(f"event {iso(event['at'])}: {event['kind']} by {who} into task "
              f"{event['task']}: {event['command']}")


def _peak(a: dict) -> str:
    if not a["peak_rss_bytes"]:
        return ""
    text = human_bytes(a["peak_rss_bytes"])
    if a["memory_request_bytes"]:
        text += f" of {human_bytes(a['memory_request_bytes'])}"
    return text


def _secs(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}s"


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def job_url(args: argparse.Namespace) -> int:
    answer = inspect.task_url(resolve_job(args.job_id), args.port, args.task)
    print(json.dumps(answer) if args.json else answer["url"])
    return 0


def task_stack(args: argparse.Namespace) -> int:
    job_id, index = task_of(args.task)
    answer = inspect.task_stack(job_id, index)
    if args.json:
        print(json.dumps(answer))
        return 0
    print(f"{job_id} task {index} (attempt {answer['attempt_id']} on "
          f"{answer['worker_id']})")
    for proc in answer["processes"]:
        print(f"\n=== process {proc['pid']}: {proc['command']}")
        print(proc["text"])
    return 0


def task_profile(args: argparse.Namespace) -> int:
    if not 0 < args.seconds <= MAX_PROFILE_S:
        raise InvalidRequestError(f"--seconds {args.seconds:g}: a profile lasts more than 0 "
                                  f"and at most {MAX_PROFILE_S:g} seconds", "--seconds")
    job_id, index = task_of(args.task)
    got = inspect.task_profile(job_id, index, args.seconds, args.rate)
    name = f"{job_id} task {index} ({got['attempt_id']})"
    text = {"speedscope": lambda: flame.speedscope(got["folded"], name),
            "svg": lambda: flame.svg(got["folded"], name),
            "folded": lambda: got["folded"]}[args.format]()
    path = args.output or Path(f"profile-{job_id.strip('/').replace('/', '-')}-{index}."
                               f"{_FORMATS[args.format]}")
    path.write_text(text)
    shown = {"path": str(path), "format": args.format, "samples": got["samples"],
             "ended_early": got["ended_early"], "note": got["note"]}
    print(json.dumps(shown) if args.json else f"wrote {path} ({args.format}): {got['note']}")
    return 0


def _exec_options(args: argparse.Namespace) -> list[str]:
    """The command after `--`; options given between JOB and `--` (argparse leaves them in
    the remainder: `iris task exec JOB --admin-token-file F -- CMD`) are read here."""
    rest = list(args.command)
    before, command = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest \
        else ([], rest)
    while before:
        option = before.pop(0)
        name, _, value = option.partition("=")
        if name != "--admin-token-file" or not (value or before):
            raise InvalidRequestError(f"{option}: not an option of iris task exec (give the "
                                      "command after --)", "command")
        args.admin_token_file = Path(value or before.pop(0))
    return command


def task_exec(args: argparse.Namespace) -> int:
    command = _exec_options(args)
    if not command:
        raise InvalidRequestError("give the command after --, e.g. iris task exec train/0 "
                                  "-- python -V", "command")
    job_id, index = task_of(args.task)
    stream = inspect.task_exec(job_id, command, index, admin_token_file=args.admin_token_file)
    outs = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
    try:
        for name, data in stream:
            outs.get(name, sys.stdout.buffer).write(data)
            outs.get(name, sys.stdout.buffer).flush()
    except KeyboardInterrupt:
        stream.close()
        return 130
    code = stream.exit_code
    if code is None:
        return 1
    return code if code >= 0 else 128 - code  # killed by signal N: 128+N, as a shell says
