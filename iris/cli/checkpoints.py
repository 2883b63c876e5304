"""`iris cluster checkpoint` and `iris cluster checkpoints`: the controller's state in GCS.

Both ask the running controller (it holds the bucket's address and credentials); restoring
is `iris controller serve --restore NAME`, on the controller's host.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

import iris
from iris.base.clock import SYSTEM_CLOCK
from iris.cli.jobs import print_rows
from iris.client.jobs import _controller
from iris.wire.states import TERMINAL_JOB

# A checkpoint of 100,000 jobs took seconds here (bench/RESULTS.md); 10 minutes covers a
# slow link without hanging forever on a dead one.
_TAKE_TIMEOUT_S = 600.0


def checkpoint(args: argparse.Namespace) -> int:
    ctx = iris.current()
    taken = _controller(ctx, "checkpoint", _TAKE_TIMEOUT_S, timeout_s=_TAKE_TIMEOUT_S + 30)
    if args.json:
        print(json.dumps(taken))
    else:
        print(f"checkpoint {taken['name']}: {_size(taken['bytes'])} ({taken['jobs']} jobs, "
              f"{taken['pack_s'] + taken['upload_s']:.1f} s) in {taken['where']}")
    return 0


def checkpoints(args: argparse.Namespace) -> int:
    listing = _controller(iris.current(), "checkpoints", timeout_s=120.0)
    rows = [_row(c) for c in listing["checkpoints"]]
    if args.json:
        print(json.dumps({**listing, "checkpoints": rows}))
        return 0
    print(f"checkpoints in {listing['where']} (every {listing['interval_s']:.0f} s while "
          f"anything changes, or after {listing['after_changes']} changes)")
    owner = listing.get("owner")
    if owner:  # which controller writes here (checkpoint/ownership.py)
        print(f"owned by the controller on {owner['host']} (state dir {owner['state_dir']}, "
              f"pid {owner['pid']}, epoch {owner['epoch']})")
    print_rows(rows, ["name", "time", "size", "jobs", "live", "schema"], False)
    newest = next((c for c in reversed(listing["checkpoints"]) if "taken_at" in c), None)
    if newest is not None:  # what losing the machine now would cost, at most
        age = SYSTEM_CLOCK.wall() - newest["taken_at"]
        print(f"newest is {age:.0f} s old: losing the controller's machine now loses at most "
              "what was acknowledged since")
    if listing.get("last_error"):
        print(f"last attempt failed: {listing['last_error']}")
    return 0


def _row(c: dict) -> dict:
    if "error" in c:
        return {"name": c["name"], "time": "", "size": "", "jobs": "", "live": "",
                "schema": "", "error": c["error"]}
    by_state = c.get("jobs_by_state") or {}
    done = sum(n for s, n in by_state.items() if s in _FINISHED)
    return {"name": c["name"], "time": _time(c["taken_at"]), "taken_at": c["taken_at"],
            "size": _size(c["bytes"]),
            "bytes": c["bytes"], "jobs": c["jobs"], "live": c["jobs"] - done,
            "jobs_by_state": by_state, "schema": c["schema_version"], "seq": c["seq"]}


_FINISHED = frozenset(s.value for s in TERMINAL_JOB)


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
