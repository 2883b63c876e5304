"""`iris cluster --config F start|stop|restart|status` for a controller on this machine.

Not the daemon itself (daemon.py) nor the GCP controller VM (operate.py). `stop` stops
everything the cluster started, in order, saying each thing as it goes and waiting for it:

1. every slice of every provider, through the controller while it answers (an admin call,
   with the token in the cluster dir: `stop_slices`, each Region deleting what its provider
   lists; local slices' workers say goodbye and their tasks stop with them);
2. the slices of gcp regions still listed (the controller was down, or made one meanwhile),
   deleted from here;
3. the controller (SIGTERM; it stops what it still runs first);
4. any process left with the cluster's mark (cluster_dir.py): SIGTERM, then SIGKILL.

It exits non-zero naming whatever it could not stop. `restart` stops the controller (its
local slices go with it; cloud slices stay) and starts it on the same state directory: the
jobs are kept, and it says how many.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from iris.actors import tokens
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import IrisError
from iris.cli import cluster_dir
from iris.cli.daemon import LocalController
from iris.cli.slices import Providers

# Leftover marked processes get this long after SIGTERM (a worker's tasks their stop grace,
# 10 s, and its goodbye) before SIGKILL.
_SWEEP_GRACE_S = 20.0
# A controller that holds its directory but does not answer within this long is not asked
# for its slices (a stopped or wedged one: step 3 stops it anyway).
_ANSWER_S = 5.0
# How long the controller may take to delete every slice: cloud deletes take minutes.
_STOP_SLICES_S = 900.0


def start(host: LocalController, args: argparse.Namespace) -> int:
    facts = host.start(args.timeout, sys.stderr)
    facts["workers"] = len(call(host, "list_workers"))
    if args.json:
        print(json.dumps(facts))
        return 0
    print(f"controller answering at {facts['address']} (pid {facts['pid']}, "
          f"{facts['workers']} workers; started in {facts['started_in_s']:.1f} s)")
    print(f"  export IRIS_ADDRESS={facts['address']}")
    if facts["dashboard"]:
        print(f"  dashboard: {facts['dashboard']}")
    print(f"  cluster dir: {facts['cluster_dir']} (log: {facts['log']})")
    return 0


def restart(host: LocalController, args: argparse.Namespace) -> int:
    stopped = host.stop(args.timeout)
    print(_stopped_line(stopped), file=sys.stderr, flush=True)
    if stopped["pid"] and not stopped["stopped"]:
        raise IrisError(f"could not stop the controller pid {stopped['pid']}: not restarted")
    facts = host.start(args.timeout, sys.stderr)
    jobs = call(host, "list_jobs", None, True)
    active = sum(1 for j in jobs if j["state"] in ("pending", "running"))
    out = {**facts, "stopped": stopped, "jobs_kept": len(jobs), "active_jobs": active}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"controller restarted at {facts['address']} (pid {facts['pid']}); jobs kept: "
              f"{len(jobs)} ({active} active), from {facts['cluster_dir']}")
    return 0


def stop(host: LocalController, providers: Providers, args: argparse.Namespace,
         whole: bool) -> int:
    """Steps 1-4 of the module docstring (1, 2 and 4 only with `whole`)."""
    started = SYSTEM_CLOCK.monotonic()
    out: dict[str, Any] = {"slices_deleted": [], "controller": None, "processes": [],
                           "failed": []}
    if whole:
        _stop_slices_through_controller(host, out)
        _delete_cloud_slices(providers, out)
    out["controller"] = host.stop(args.timeout)
    print(_stopped_line(out["controller"]), file=sys.stderr, flush=True)
    if out["controller"]["pid"] and not out["controller"]["stopped"]:
        out["failed"].append(f"the controller pid {out['controller']['pid']}")
    if whole:
        _delete_cloud_slices(providers, out)  # made by the autoscaler meanwhile
        stopped, left = cluster_dir.sweep(str(host.dir), _SWEEP_GRACE_S)
        for pid, command in sorted(stopped.items()):
            print(f"stopped leftover process {pid} ({command[:100]})", file=sys.stderr)
        out["processes"] = sorted(stopped)
        out["failed"] += [f"process {pid} ({command[:100]})" for pid, command in left.items()]
    out["stopped_in_s"] = round(SYSTEM_CLOCK.monotonic() - started, 3)
    if args.json:
        print(json.dumps(out))
    if out["failed"]:
        raise IrisError(f"could not stop: {'; '.join(out['failed'])}")
    return 0


def _stop_slices_through_controller(host: LocalController, out: dict) -> None:
    held = host.holder()
    if held is None:
        print("controller not running: nothing to ask for its slices", file=sys.stderr)
        return
    try:
        token = tokens.read(host.dir / tokens.ADMIN_TOKEN_FILE)
        call(host, "list_workers", timeout_s=_ANSWER_S)  # answering at all?
        regions = call(host, "stop_slices", auth=token, timeout_s=_STOP_SLICES_S)
    except IrisError as exc:  # its slices stop with it (step 3) if they are local
        print(f"the controller did not stop its slices ({exc}); stopping it stops the "
              "local ones", file=sys.stderr)
        return
    for region in regions:
        for row in region["deleted"]:
            hosts = ", ".join(h["host_id"] for h in row["hosts"]) or "no hosts"
            print(f"stopped slice {row['slice_id']} of {region['region']} ({hosts})",
                  file=sys.stderr, flush=True)
            out["slices_deleted"].append(row["slice_id"])
        out["failed"] += [f"slice {sid} of {region['region']} ({why})"
                          for sid, why in region["failed"].items()]


def _delete_cloud_slices(providers: Providers, out: dict) -> None:
    for info in providers.all_slices():
        try:
            providers.find(info.slice_id)[1].delete_slice(info.slice_id)
        except IrisError as exc:
            out["failed"].append(f"slice {info.slice_id} ({exc})")
            continue
        print(f"deleted slice {info.slice_id}", file=sys.stderr, flush=True)
        out["slices_deleted"].append(info.slice_id)


def _stopped_line(stopped: dict) -> str:
    if not stopped["pid"]:
        return "controller: not running"
    if stopped["how"] == "gone":
        return f"controller pid {stopped['pid']}: already gone"
    verb = "stopped" if stopped["stopped"] else "could not stop"
    return f"{verb} the controller pid {stopped['pid']} at {stopped['address']} " \
           f"({stopped['how']})"


def status(host: LocalController) -> dict:
    """Where the controller runs here, and whether it does."""
    held = host.holder()
    return {"where": "this machine", "running": held is not None,
            "pid": held.pid if held else None, **host.facts()}


def call(host: LocalController, method: str, *args: Any, auth: bytes | None = None,
         timeout_s: float = 30.0) -> Any:
    import iris
    from iris.client.retry import call_controller

    with iris.connect(host.address) as ctx:
        return call_controller(ctx.node, host.address, method, args, timeout_s=timeout_s,
                               auth=auth)


__all__ = ["call", "restart", "start", "status", "stop"]
