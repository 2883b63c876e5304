"""`iris job ...`, `iris worker list|drain`, `iris cluster status`: client verbs over the
controller.

Each prints a table, or with --json the same rows as one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

import iris
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import InvalidRequestError, IrisError, NotFoundError
from iris.base.resources import Resources
from iris.client.jobs import TERMINAL, JobHandle, _controller, _user
from iris.client.retry import call_controller
from iris.logstore.model import format_line, iso_time
from iris.logstore.reader import LogFilter
from iris.wire.fencing import LATE_RULE, worker_is_late


def iso(ts: float | None) -> str:
    """Epoch seconds as the CLI prints times: ISO-8601 UTC, to the second."""
    return iso_time(ts)[:19] + "Z" if ts else ""


def resolve_job(given: str) -> str:
    """A job named in full (`/alice/train-3f2a1c`), by a unique prefix of its id, or by a name
    relative to the user (`train`, `train-3f`): the one job it names, or an error listing
    the candidates."""
    ids = [row["job_id"] for row in _controller(iris.current(), "list_jobs", None, True)]
    if given in ids:
        return given
    user = _user()
    prefixes = [given] if given.startswith("/") else [f"/{user}/{given}", f"/{given}"]
    matches = sorted({j for j in ids for p in prefixes if j.startswith(p)})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFoundError(f"no job {given!r} (ids, unique id prefixes and names relative to "
                            f"/{user}/ are accepted; `iris job list` shows them)")
    shown = ", ".join(matches[:5]) + (" ..." if len(matches) > 5 else "")
    raise InvalidRequestError(f"{given!r} names {len(matches)} jobs ({shown}): give more of "
                              "its id", "job_id")


def job_run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise InvalidRequestError("give the command after --, e.g. iris job run "
                                  "-- python -V", "command")
    bad = [pair for pair in args.env if "=" not in pair or pair.startswith("=")]
    if bad:
        raise InvalidRequestError(f"--env {bad[0]}: expected NAME=VALUE, e.g. --env SEED=1",
                                  "--env")
    env = dict(pair.split("=", 1) for pair in args.env)
    handle = iris.submit(command, name=args.name, replicas=args.replicas, env=env,
                         pip=args.pip, priority=args.priority, dry_run=args.dry_run,
                         durable=args.durable,
                         existing_capacity_only=args.existing_capacity_only,
                         checkpoint_every=args.checkpoint_every,
                         resources=Resources(cpu=args.cpu, memory=args.memory, tpu=args.tpu,
                                             gpu=args.gpu, count=args.count,
                                             hosts=args.hosts, ports=args.port))
    if args.dry_run:
        print(json.dumps(handle) if args.json else handle["summary"])
        for task, host in sorted(handle["placements"].items()) if not args.json else ():
            print(f"  {task} -> {host}")
        for task, reason in sorted(handle["pending"].items()) if not args.json else ():
            print(f"  {task}: {reason['message']}")
        return 0 if handle["fits_now"] else 1
    if args.no_wait:
        print(json.dumps({"job_id": handle.job_id}) if args.json else handle.job_id)
        return 0
    print(f"submitted {handle.job_id}", file=sys.stderr)
    done = threading.Event()
    watcher = threading.Thread(target=_show_progress, args=(handle, done), daemon=True)
    watcher.start()
    try:
        out = sys.stderr if args.json else sys.stdout  # --json: stdout is the status alone
        for line in handle.logs(follow=True):
            print(format_line(line, args.timestamps), file=out, flush=True)
        status = handle.wait()
    except KeyboardInterrupt:
        return _interrupted(handle, args.detach_on_interrupt)
    finally:
        done.set()
        watcher.join(5)
    sys.stdout.flush()  # the job's output first, then its final state
    print(json.dumps(status) if args.json else f"{handle.job_id}: {_final(status)}",
          file=sys.stdout if args.json else sys.stderr)
    return 0 if status["state"] == "succeeded" else 1


def _final(status: dict) -> str:
    """`succeeded`, or `failed: task 0: exited with code 3 (retry budget spent)`."""
    errors = [f"task {t['index']}: {t['error'].splitlines()[0]}"
              for t in status.get("tasks", []) if t.get("error")]
    return status["state"] + (": " + "; ".join(errors[:3]) if errors and
                              status["state"] != "succeeded" else "")


def _interrupted(handle: JobHandle, detach: bool) -> int:
    follow = f"follow it again with: iris job logs -f {handle.job_id}"
    if detach:
        print(f"\niris: left {handle.job_id} running; {follow}; stop it with: "
              f"iris job stop {handle.job_id}", file=sys.stderr)
        return 130
    stop = True
    if sys.stdin.isatty():
        try:
            stop = input(f"\nstop {handle.job_id}? [Y/n] ").strip().lower() not in ("n", "no")
        except (EOFError, KeyboardInterrupt):
            stop = True
    if stop:
        handle.kill()
        print(f"\niris: stopped {handle.job_id}", file=sys.stderr)
    else:
        print(f"iris: left {handle.job_id} running; {follow}", file=sys.stderr)
    return 130


def _show_progress(handle: JobHandle, done: threading.Event, every_s: float = 0.5) -> None:
    """Print the job's state to stderr whenever it changes (and why it is pending)."""
    last = None
    while not done.wait(every_s):
        try:
            status = handle.status()
        except iris.IrisError:
            continue
        counts = " ".join(f"{k}={v}" for k, v in status["task_counts"].items())
        reason = (status.get("pending_reason") or {}).get("message", "")
        line = f"[iris] {status['job_id']}: {status['state']} ({counts})" + (
            f"; pending because {reason}" if reason else "")
        if status["state"] in TERMINAL:
            return  # the final state is printed after the last output line, by job_run
        if line != last:
            print(line, file=sys.stderr, flush=True)
            last = line


def job_list(args: argparse.Namespace) -> int:
    rows = _controller(iris.current(), "list_jobs", args.prefix, not args.active)
    for row in rows:
        row["tasks"] = " ".join(f"{k}={v}" for k, v in row["task_counts"].items())
        row["why_pending"] = (row.get("pending_reason") or {}).get("message", "")
        row["submitted"] = iso(row.get("submitted_at"))  # JSON also has submitted_at (epoch)
    print_rows(rows, ["job_id", "state", "priority", "submitted", "tasks", "why_pending"],
               args.json)
    return 0


def job_status(args: argparse.Namespace) -> int:
    status = JobHandle(resolve_job(args.job_id), iris.current()).status()
    if args.json:
        print(json.dumps(status))
        return 0
    print(f"{status['job_id']}  {status['state']}  {status.get('error') or ''}".rstrip())
    print(f"  submitted {iso(status.get('submitted_at'))}" + (
        f", finished {iso(status['finished_at'])}" if status.get("finished_at") else ""))
    if status.get("pending_reason"):
        print(f"  pending: {status['pending_reason']['message']}")
    columns = ["index", "state", "attempts", "worker_id", "error"]
    if any(t.get("accelerator") for t in status["tasks"]):  # which type (fallbacks) each got
        columns.insert(4, "accelerator")
    print_rows(status["tasks"], columns, False)
    return 0


def job_stop(args: argparse.Namespace) -> int:
    ctx = iris.current()
    if args.prefix and args.job_id:  # else one of them would be ignored without a word
        raise InvalidRequestError(f"give a job id ({args.job_id}) or --prefix "
                                  f"({args.prefix}), not both", "job_id")
    if args.prefix:
        killed = _controller(ctx, "kill_prefix", args.prefix)
    elif args.job_id:
        killed = [_controller(ctx, "kill", resolve_job(args.job_id))["job_id"]]
    else:
        raise InvalidRequestError("give a job id or --prefix, e.g. iris job stop train", "job_id")
    print(json.dumps(killed) if args.json else "\n".join(f"killed {j}" for j in killed))
    return 0


def job_logs(args: argparse.Namespace) -> int:
    LogFilter(task=args.task, since=args.since, grep=args.grep)  # bad filters: before any call
    try:
        job_id = resolve_job(args.job_id)
    except NotFoundError:
        if not args.job_id.startswith("/"):
            raise
        job_id = args.job_id  # a full id the controller pruned: the store may keep its logs
    # An unknown job is NotFoundError (as `iris job status`) from logs(), not an empty log.
    handle = JobHandle(job_id, iris.current())
    for line in handle.logs(follow=args.follow, task=args.task, since=args.since,
                            grep=args.grep, build=args.build_logs):
        print(json.dumps(line.to_dict()) if args.json else format_line(line, args.timestamps),
              flush=args.follow)
    return 0


def worker_list(args: argparse.Namespace) -> int:
    rows = _controller(iris.current(), "list_workers")
    for row in rows:
        row["running"] = len(row["attempts"])
        row["health"] = "late" if worker_is_late(row) else "healthy"
    print_rows(rows, ["worker_id", "region", "address", "cpu", "running", "health",
                      "last_heard_s_ago"], args.json)
    if rows and not args.json:
        print(LATE_RULE, file=sys.stderr)  # what the health column means
    return 0


def worker_drain(args: argparse.Namespace) -> int:
    """Tell a worker to leave (through the controller, with the admin token); wait until it
    has left the worker list, saying what it handed back."""
    if not 0 < args.timeout < float("inf"):  # NaN too: a drain would never wait
        raise InvalidRequestError(f"--timeout {args.timeout:g}: expected a number of seconds "
                                  "> 0, e.g. 60", "--timeout")
    ctx, told = _admin_worker_call(args, "drain", "drain_worker", "draining a worker")
    print(f"worker {told['worker_id']} ({told['address']}) told to leave; handing back "
          f"{len(told['attempts'])} attempts", file=sys.stderr, flush=True)
    left = args.no_wait or _wait_gone(ctx, args.target, args.timeout)
    if not left:  # under --json, this error is the one document on stdout
        raise IrisError(f"worker {args.target} is still listed after {args.timeout:g} s "
                        "(its tasks may be slow to stop; see iris worker list)")
    if args.json:
        print(json.dumps({**told, "left": not args.no_wait}))
    if not args.no_wait:
        print(f"worker {args.target} left", file=sys.stderr)
    return 0


def worker_revoke(args: argparse.Namespace) -> int:
    """Revoke a worker's credential (admin token): its next call is refused, its id may not
    join again, its tasks are requeued elsewhere; no other worker is touched."""
    _, told = _admin_worker_call(args, "revoke", "revoke_worker", "revoking a worker")
    if args.json:
        print(json.dumps(told))
    print(f"worker {told['worker_id']} revoked; {len(told['attempts'])} attempts requeued",
          file=sys.stderr)
    if told.get("was") == "unknown":  # lost over a minute ago, or never joined (a typo?)
        print(f"note: {told['worker_id']} was neither registered nor holding a credential; "
              "its id is barred from joining all the same (remove it from "
              "STATE_DIR/revoked_workers and restart the controller to undo)", file=sys.stderr)
    return 0


def _admin_worker_call(args: argparse.Namespace, verb: str, method: str,
                       doing: str) -> tuple[Any, dict]:
    """`iris worker VERB ID`: the controller's `method` on one worker, with the admin token."""
    from iris.client.budgets import admin_token

    if not args.target:
        raise InvalidRequestError(f"iris worker {verb}: name the worker, e.g. iris worker "
                                  f"{verb} w-3f2a1c (iris worker list names them)")
    ctx = iris.current()
    token = admin_token(args.admin_token_file, doing)
    return ctx, call_controller(ctx.node, ctx.address, method, (args.target,), auth=token)


def _wait_gone(ctx: Any, worker_id: str, timeout_s: float) -> bool:
    gate, deadline = threading.Event(), SYSTEM_CLOCK.monotonic() + timeout_s
    while SYSTEM_CLOCK.monotonic() < deadline:
        if all(w["worker_id"] != worker_id for w in _controller(ctx, "list_workers")):
            return True
        gate.wait(0.1)  # the controller offers no event for a worker leaving
    return False


def cluster_status(args: argparse.Namespace) -> int:
    ctx = iris.current()
    jobs = _controller(ctx, "list_jobs", None, True)
    workers = _controller(ctx, "list_workers")
    by_state: dict[str, int] = {}
    for job in jobs:
        by_state[job["state"]] = by_state.get(job["state"], 0) + 1
    summary = {"address": ctx.address, "workers": len(workers), "jobs": by_state,
               "active_jobs": sum(n for s, n in by_state.items() if s not in TERMINAL),
               "scale_groups": _scale_groups(_controller(ctx, "snapshot"))}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"cluster {summary['address']}: {summary['workers']} workers, "
          f"{summary['active_jobs']} active jobs; by state: {by_state}")
    for g in summary["scale_groups"]:
        print(f"  {g['region']}/{g['group']} [{g['provider']}] ({g['accelerator']}): "
              f"{g['ready']} ready, {g['booting']} booting, {g['preempted']} preempted "
              f"(min {g['min']}, max {g['max']}){'; held back: ' + g['held'] if g['held'] else ''}"
              f"{'; waiting: ' + g['waiting'] if g['waiting'] else ''}")
    return 0


def _scale_groups(snapshot: dict) -> list[dict]:
    """Autoscaled groups from the controller's snapshot: slices by state, bounds, holds."""
    rows = []
    for region in snapshot.get("capacity") or []:
        for g in region.get("groups", []):
            states = [s.get("state") for s in g.get("slices", [])]
            # The provider's words for a slice still coming (Slurm: "pending (Priority)").
            waiting = next((s.get("detail", "") for s in g.get("slices", [])
                            if s.get("state") == "CREATING" and s.get("detail")), "")
            rows.append({"region": region.get("region"), "group": g.get("group"),
                         "provider": g.get("provider", ""), "waiting": waiting,
                         "accelerator": g.get("accelerator"), "min": g.get("min"),
                         "max": g.get("max"), "ready": states.count("READY"),
                         "booting": states.count("CREATING"),
                         "preempted": states.count("PREEMPTED"), "held": g.get("held", "")})
    return rows


def print_rows(rows: list[dict[str, Any]], columns: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows))
        return
    widths = [max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in rows:
        print("  ".join(str(row.get(c, "") if row.get(c) is not None else "").ljust(w)
                        for c, w in zip(columns, widths, strict=True)).rstrip())
