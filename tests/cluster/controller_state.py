"""What a user or operator could see change in a controller: its store's rows and its live
listings. Bad-input tests compare it before and after a refused call."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from iris.actors.keys import CONTROLLER_KEY, region_key
from iris.base.errors import ActorNotFoundError


def controller_state(node, address: str, db_path: Path) -> dict:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = {t: db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
                for t in ("jobs", "tasks", "attempts", "results", "requests")}
    finally:
        db.close()

    def ask(method: str):
        return node.call(address, CONTROLLER_KEY, method, timeout_s=30).result(60)

    # Without what moves by itself: when each was last heard, and so whether it is late.
    moving = {"last_heard_s_ago", "late", "report_interval_s", "late_after_s"}
    workers = [{k: v for k, v in w.items() if k not in moving} for w in ask("list_workers")]
    return {"rows": rows, "workers": workers, "jobs": ask("list_jobs"), "regions": ask("regions")}


def call(cluster, method, *args, key=CONTROLLER_KEY):
    """One call to the cluster's controller (or, with `key`, another actor of its node)."""
    return cluster.node.call(cluster.address, key, method, args).result(60)


def regions_free(cluster, regions) -> bool:
    """Every region's actor is up (the controller makes one when it first syncs the region's
    hosts) and holds no reservation: what a test sharing a cluster waits for first."""
    try:
        return all(call(cluster, "live_reservations", key=region_key(r)) == 0 for r in regions)
    except ActorNotFoundError:
        return False

