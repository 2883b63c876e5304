"""What each dashboard page shows, as JSON-safe dicts. Not HTTP (app.py) and not the page.

Sources, chosen so a dashboard read never waits for the controller's own thread:
- jobs and job detail: the job store through a read-only SQLite connection (reads.py), on one
  dedicated reader thread, so slow disks stall neither the controller nor this HTTP loop;
- live state (workers, pending reasons, counts): the controller's `snapshot()`, an async
  method that returns an already-built dict from the node's loop;
- actors: the registry's async `list`; logs: the log sink, read on a second thread;
- kill: the controller actor's `kill`, the same call the CLI makes;
- capacity: the snapshot's "capacity" key (the autoscaler's), shaped by capacity.py;
- /metrics: the snapshot, task counts from the store, and this node's call stats.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris.actors import REGISTRY_KEY, Node
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import InvalidRequestError
from iris.base.ids import parent_path
from iris.dashboard import metrics
from iris.dashboard.capacity import capacity_view
from iris.dashboard.history import History
from iris.dashboard.jobview import enrich, humanize
from iris.dashboard.reads import JobQuery, JobReader
from iris.logstore.config import LogStoreConfig, open_sink
from iris.logstore.model import STREAMS, format_line
from iris.logstore.reader import LogFilter, read_logs
from iris.wire.fencing import LATE_RULE, late_after_s, worker_is_late

_log = logging.getLogger(__name__)
# Calls to the controller and registry: they answer in milliseconds; 10 s covers a loaded
# machine without leaving a browser hanging forever.
_CALL_TIMEOUT_S = 10.0
# The controller rebuilds its snapshot every 0.5 s: fetching it more often returns the same
# dict, and with thousands of pending jobs it is ~100 KB to encode on the controller's loop.
_SNAPSHOT_TTL_S = 0.5
MAX_LOG_TAIL = 2_000
"""Lines a job page may ask for; the full log is `iris job logs`."""


class Backend:
    """Gathers page data. `scale_groups`: dicts from the cluster config (capacity page)."""

    def __init__(self, node: Node, address: str, state_dir: str | Path,
                 scale_groups: list[dict] | None = None):
        self.node = node
        self.address = address
        self.state_dir = Path(state_dir)
        self.scale_groups = scale_groups
        self._db_thread = concurrent.futures.ThreadPoolExecutor(1, "iris-dashboard-db")
        self._log_thread = concurrent.futures.ThreadPoolExecutor(1, "iris-dashboard-logs")
        # Both threads start now and live as long as the dashboard, not on the first page.
        for pool in (self._db_thread, self._log_thread):
            pool.submit(lambda: None).result()
        self._reader: JobReader | None = None
        self._sink = None
        self._snapshot: dict | None = None
        self._snapshot_at = 0.0
        self._snapshot_fetch: asyncio.Future | None = None  # one fetch shared by all pages
        self.history = History()

    def close(self) -> None:
        if self._reader is not None:
            self._db_thread.submit(self._reader.close).result()
        self._db_thread.shutdown(wait=True)
        self._log_thread.shutdown(wait=True, cancel_futures=True)

    async def _db(self, fn: Callable[[JobReader], Any]) -> Any:
        def run() -> Any:
            if self._reader is None:
                self._reader = JobReader(self.state_dir)
            return fn(self._reader)
        return await asyncio.get_running_loop().run_in_executor(self._db_thread, run)

    async def _call(self, key: str, method: str, *args: Any) -> Any:
        return await self.node.call(self.address, key, method, args, timeout_s=_CALL_TIMEOUT_S)

    async def snapshot(self) -> dict:
        """The controller's live snapshot, at most _SNAPSHOT_TTL_S older than its own age."""
        now = self.node.clock.monotonic()
        if self._snapshot is not None and now - self._snapshot_at < _SNAPSHOT_TTL_S:
            return self._snapshot
        if self._snapshot_fetch is None:
            self._snapshot_fetch = asyncio.ensure_future(self._fetch_snapshot())
        return await asyncio.shield(self._snapshot_fetch)

    async def _fetch_snapshot(self) -> dict:
        try:
            snap = await self._call(CONTROLLER_KEY, "snapshot")
            self._snapshot, self._snapshot_at = snap, self.node.clock.monotonic()
            return snap
        finally:
            self._snapshot_fetch = None

    # ------------------------------------------------------------ pages

    async def jobs(self, query: JobQuery) -> dict:
        page = await self._db(lambda r: r.jobs(query))
        for job in page["jobs"]:
            job["error"] = humanize(job["error"])
        if not any(j["task_counts"].get("pending") for j in page["jobs"]):
            return page  # nothing waits on this page: no reason to fetch the snapshot
        reasons = (await self.snapshot()).get("pending_reasons", {})
        for job in page["jobs"]:
            if job["job_id"] in reasons:
                reason = reasons[job["job_id"]]
                job["pending_reason"] = {**reason, "message": humanize(reason["message"])}
        return page

    async def job(self, job_id: str) -> dict:
        view = await self._db(lambda r: r.job(job_id))
        reason = (await self.snapshot()).get("pending_reasons", {}).get(job_id)
        view["pending_reason"] = reason
        return enrich(view, self.node.clock.wall())

    async def _read_logs(self, job_id: str, task: int | None, stream: str | None,
                         grep: str | None) -> list:
        if stream is not None and stream not in STREAMS:
            raise InvalidRequestError(f"stream: expected one of {', '.join(STREAMS)}, got "
                                      f"{stream!r}", "stream")
        flt = LogFilter(task=task, grep=grep, build=stream == "build")  # checks task, grep
        await self._db(lambda r: r.job(job_id))  # NotFoundError for an unknown job
        if self._sink is None:
            config = await self._call(CONTROLLER_KEY, "log_config")
            self._sink = open_sink(LogStoreConfig.from_dict(config))
        sink = self._sink

        def read() -> list:
            return [ln for ln in read_logs(sink, job_id, flt)
                    if stream in (None, "build") or ln.stream == stream]
        return await asyncio.get_running_loop().run_in_executor(self._log_thread, read)

    async def log_tail(self, job_id: str, lines: int, task: int | None = None,
                       stream: str | None = None, grep: str | None = None) -> dict:
        """The last `lines` lines, each with its time (epoch `ts` and ISO `time`); `stream`
        stdout, stderr or build (the environment build, never mixed into the others)."""
        got = await self._read_logs(job_id, task, stream, grep)
        return {"job_id": job_id, "total": len(got),
                "lines": [ln.to_dict() for ln in got[-lines:]]}

    async def log_text(self, job_id: str, task: int | None = None,
                       stream: str | None = None, grep: str | None = None) -> str:
        """The whole log as `iris job logs --timestamps` prints it (the download)."""
        got = await self._read_logs(job_id, task, stream, grep)
        return "".join(format_line(ln, timestamps=True) + "\n" for ln in got)

    async def sample(self) -> None:
        """One point of the charts strip (the server calls this every SAMPLE_EVERY_S)."""
        snap = await self.snapshot()
        self.history.add(snap.get("at") or self.node.clock.wall(), snap)

    async def history_view(self) -> dict:
        """The sampled hour, ending with a point from the current snapshot (so the figures
        shown are now's, not up to SAMPLE_EVERY_S old)."""
        snap = await self.snapshot()
        now = self.node.clock.wall()
        return self.history.view(now, current=snap)

    async def figures(self, hours: float) -> dict:
        """The live figures (utilization by accelerator and region over time, queue time by
        band, preemptions and wasted chip-hours, fragmentation): the controller's `figures`,
        built on its tick and answered from its loop."""
        return await self._call(CONTROLLER_KEY, "figures", hours)

    async def kill(self, job_id: str) -> dict:
        await self._db(lambda r: r.job(job_id))  # NotFoundError before anything changes
        return await self._call(CONTROLLER_KEY, "kill", job_id, "killed from the dashboard")

    async def workers(self) -> dict:
        snap = await self.snapshot()
        workers = snap.get("workers", [])
        ids = [a for w in workers for a in w.get("attempts", [])]
        attempts = await self._db(lambda r: r.attempts(ids))
        groups: dict[tuple, list] = {}
        for w in workers:
            attrs = w.get("attributes", {})
            row = {**w, "health": "late" if worker_is_late(w) else "healthy",
                   "health_rule": _health_rule(w),
                   "running": [_attempt_row(a, attempts.get(a)) for a in w.get("attempts", [])]}
            key = (w.get("region", "local"), attrs.get("zone", "-"),
                   attrs.get("scale_group", "-"))
            groups.setdefault(key, []).append(row)
        return {"at": snap.get("at"), "groups": [
            {"region": r, "zone": z, "scale_group": g, "workers": rows}
            for (r, z, g), rows in sorted(groups.items())]}

    async def capacity(self) -> dict:
        return capacity_view(await self.snapshot(), self.scale_groups)

    async def actors(self, prefix: str = "/") -> dict:
        entries = await self._call(REGISTRY_KEY, "list", prefix)
        rows = [{"name": e["name"], "namespace": parent_path(e["name"]),
                 "address": e["address"], "host": _host(e["address"]),
                 "key": e["key"], "owner": e["owner"],
                 "registered_at": e.get("registered_at"),
                 # Iris's own names (/iris/...): shown behind the page's toggle
                 "internal": e["name"].startswith("/iris/")} for e in entries]
        return {"actors": sorted(rows, key=lambda r: (r["name"], r["address"]))}

    async def scheduler(self) -> dict:
        bands = await self._db(lambda r: r.pending_queue())
        snap = await self.snapshot()
        reasons = snap.get("pending_reasons", {})
        for band in bands.values():
            for job in band:
                reason = reasons.get(job["job_id"])
                job["pending_reason"] = reason and {**reason,
                                                    "message": humanize(reason["message"])}
        return {"bands": [{"priority": p, "jobs": jobs} for p, jobs in bands.items()],
                "pending_tasks": snap.get("pending_tasks", 0)}

    async def usage(self) -> dict:
        """Accelerator-hours per user over the last 7 days, and the operators' budgets."""
        return await self._call(CONTROLLER_KEY, "budget_list")

    async def metrics_text(self) -> str:
        snap = await self.snapshot()
        tasks = await self._db(lambda r: r.task_states())
        stats = self.node.stats
        return metrics.render(snap, tasks, stats.as_dict(), call_outcomes=stats.call_outcomes(),
                              call_latency=stats.latency_snapshot(),
                              served_latency=self.node.served_latency())


def _attempt_row(attempt_id: str, record: dict | None) -> dict:
    if record is None:  # committed after our read snapshot; shown by id alone
        return {"attempt_id": attempt_id}
    return {"attempt_id": attempt_id, "job_id": record["job_id"],
            "task_index": record["task_index"], "state": record["state"]}


def _host(address: str) -> str:
    """`tcp://10.0.0.3:5555` -> `10.0.0.3`."""
    return address.split("//")[-1].rsplit(":", 1)[0]


def _health_rule(row: dict) -> str:
    """What the Health label means for this worker (the page shows it on hover)."""
    interval = row.get("report_interval_s")
    if interval is None:
        return LATE_RULE
    return (f"{LATE_RULE}; this worker was asked to report every {interval:g} s, so it is "
            f"late after {late_after_s(interval):g} s of silence")
