"""`iris job summary|url` and `iris task stack|profile|exec`: looking inside a job: their
printing (their arguments are parser_ops.py's); the calls are the client's
(client/inspect.py).

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
from iris.cli.parser_ops import FORMATS
from iris.client import inspect
from iris.wire.control import MAX_PROFILE_S

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
                               f"{FORMATS[args.format]}")
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
