"""Read-only queries on the controller's job store for the dashboard. Not the store itself.

The dashboard opens `<state_dir>/jobs.sqlite3` with its OWN connection in read-only mode
(`mode=ro`): in WAL mode a reader sees the last committed snapshot and never blocks the
controller's writer, so a heavy jobs page cannot slow scheduling. Nothing here writes, and
no index is added (the schema belongs to iris/controller/jobs/store.py).

Every function takes plain parameters, validates them first (InvalidRequestError naming the
field, nothing read), and returns JSON-safe dicts.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris.base.errors import InvalidRequestError, NotFoundError, StorageError
from iris.client.jobs import FUNCTION_ENV
from iris.wire.states import DB_NAME, PRIORITIES, JobState, TaskState

MAX_PER_PAGE = 500
"""A page larger than this is a scrape, not a person reading; it would also blow the 100 ms
budget of the jobs list at 10,000 jobs."""

_SORTS = {
    # The store inserts a job's row once, at submit, and later upserts keep its rowid, so
    # rowid order is submission order: an index walk (LIMIT 50 reads 50 rows) where sorting
    # on the JSON field scanned and sorted all 10,000 (20 ms).
    "submitted": "rowid",
    "finished": "finished_at",
    "name": "job_id",
    "state": "state",
    "user": "json_extract(spec, '$.user')",
    "priority": "json_extract(spec, '$.priority')",
}
# Only the fields a listing shows, pulled out by SQLite (in C, without the GIL) instead of
# parsing each row's spec and record JSON in Python.
def _summary_columns(table: str = "jobs") -> str:
    t = table
    return (f"{t}.job_id, {t}.state, {t}.finished_at, json_extract({t}.spec, '$.user'), "
            f"json_extract({t}.spec, '$.parent'), json_extract({t}.spec, '$.priority'), "
            f"json_extract({t}.spec, '$.replicas'), "
            f"json_extract({t}.record, '$.submitted_at'), json_extract({t}.record, '$.error'), "
            f"json_extract({t}.record, '$.killed')")


_SUMMARY_COLUMNS = _summary_columns()
_JOB_STATES = frozenset(s.value for s in JobState)
_ACTIVE_STATES = ("pending", "building", "running")
# A task's and an attempt's columns (the controller's jobs/rows.py, schema 4), as the keys
# of their records (`index` is the column `idx`); a task's has_result is stored 0/1.
_TASK_FIELDS = ("job_id", "index", "state", "attempt_id", "attempts", "failures",
                "preemptions", "pending_since", "finished_at", "error", "has_result")
_TASK_COLUMNS = ", ".join(("job_id", "idx", *_TASK_FIELDS[2:]))
_ATTEMPT_FIELDS = ("attempt_id", "job_id", "task_index", "number", "worker_id", "state",
                   "assigned_at", "started_at", "finished_at", "exit_code", "error",
                   "accelerator")
_ATTEMPT_COLUMNS = ", ".join(_ATTEMPT_FIELDS)


@dataclass(frozen=True)
class JobQuery:
    """A jobs-page request. `states` empty = every state; `prefix` is a job-name prefix such as
    "/alice/tr"; `sort` one of _SORTS; `page` counts from 1."""

    states: tuple[str, ...] = ()
    user: str | None = None
    prefix: str | None = None
    sort: str = "submitted"
    descending: bool = True
    page: int = 1
    per_page: int = 50

    def __post_init__(self) -> None:
        bad = [s for s in self.states if s not in _JOB_STATES]
        if bad:
            raise InvalidRequestError(f"state: unknown job state {bad[0]!r} (known: "
                                      f"{', '.join(sorted(_JOB_STATES))})", "state")
        if self.sort not in _SORTS:
            raise InvalidRequestError(f"sort: expected one of {', '.join(_SORTS)}, "
                                      f"got {self.sort!r}", "sort")
        if not isinstance(self.page, int) or self.page < 1:
            raise InvalidRequestError(f"page: expected an integer >= 1, got {self.page!r}",
                                      "page")
        if not isinstance(self.per_page, int) or not 1 <= self.per_page <= MAX_PER_PAGE:
            raise InvalidRequestError(f"per_page: expected 1..{MAX_PER_PAGE}, "
                                      f"got {self.per_page!r}", "per_page")


class JobReader:
    """One read-only connection to the job store. Use it from one thread at a time."""

    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / DB_NAME
        if not self.path.exists():
            raise StorageError(f"no job store at {self.path} (is this the controller's "
                               f"state directory?)")
        try:
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       check_same_thread=False)
            # A reader waits this long only if a checkpoint holds the WAL index (rare, brief).
            self._db.execute("PRAGMA busy_timeout = 2000")
            self._db.execute("PRAGMA query_only = 1")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {self.path} read-only: {exc}") from exc

    def close(self) -> None:
        self._db.close()

    def jobs(self, q: JobQuery) -> dict[str, Any]:
        """One page of job summaries and the total that matched the filters."""
        where, args = _job_filter(q)
        order = f"{_SORTS[q.sort]} {'DESC' if q.descending else 'ASC'}, job_id"
        total = self._db.execute(f"SELECT COUNT(*) FROM jobs {where}", args).fetchone()[0]
        # Rowids first, then the columns of just those rows: SQLite would otherwise compute
        # the JSON columns of every row the OFFSET skips (page 150 took 20 ms instead of 5).
        rowids = [r for (r,) in self._db.execute(
            f"SELECT rowid FROM jobs {where} ORDER BY {order} LIMIT ? OFFSET ?",
            [*args, q.per_page, (q.page - 1) * q.per_page])]
        by_rowid = {row[0]: row[1:] for row in self._db.execute(
            f"SELECT rowid, {_SUMMARY_COLUMNS} FROM jobs "
            f"WHERE rowid IN ({','.join('?' * len(rowids))})", rowids)}
        jobs = [_summary(*by_rowid[r]) for r in rowids if r in by_rowid]
        counts = self._task_counts([j["job_id"] for j in jobs])
        for job in jobs:
            job["task_counts"] = counts.get(job["job_id"], {})
        return {"jobs": jobs, "total": total, "page": q.page, "per_page": q.per_page}

    def job(self, job_id: str) -> dict[str, Any]:
        """One job with every task and every attempt (worker, exit code, error, times)."""
        row = self._db.execute(f"SELECT {_SUMMARY_COLUMNS}, spec FROM jobs WHERE job_id = ?",
                               (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job {job_id}")
        view = _summary(*row[:-1])
        spec = json.loads(row[-1])
        view["spec"] = {k: spec.get(k) for k in ("resources", "replicas", "entrypoint", "pip",
                                                 "constraints", "timeout_s",
                                                 "max_retries_failure")}
        # The env is not shown (it may hold secrets); only the name iris.submit put there.
        view["spec"]["function"] = (spec.get("env") or {}).get(FUNCTION_ENV)
        attempts: dict[int, list[dict]] = {}
        for row in self._db.execute(f"SELECT {_ATTEMPT_COLUMNS} FROM attempts "
                                    "WHERE job_id = ?", (job_id,)):
            attempt = dict(zip(_ATTEMPT_FIELDS, row, strict=True))
            attempts.setdefault(attempt["task_index"], []).append(attempt)
        tasks = []
        for row in self._db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE job_id = ? "
                                    "ORDER BY idx", (job_id,)):
            task = dict(zip(_TASK_FIELDS, row, strict=True))
            task["has_result"] = bool(task["has_result"])
            task["attempt_list"] = sorted(attempts.get(task["index"], []),
                                          key=lambda a: a["number"])
            tasks.append(task)
        view["tasks"] = tasks
        view["task_counts"] = self._task_counts([job_id]).get(job_id, {})
        return view

    def attempts(self, attempt_ids: list[str]) -> dict[str, dict]:
        """Attempt records by id (for the workers page's running attempts)."""
        out: dict[str, dict] = {}
        for chunk in _chunks(attempt_ids, 500):
            marks = ",".join("?" * len(chunk))
            for row in self._db.execute(
                    f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE attempt_id IN ({marks})",
                    chunk):
                out[row[0]] = dict(zip(_ATTEMPT_FIELDS, row, strict=True))
        return out

    def pending_queue(self, limit_per_band: int = 200) -> dict[str, list[dict]]:
        """Jobs with pending tasks by priority band, each band oldest first (the order the
        scheduler tries them in)."""
        rows = self._db.execute(
            f"SELECT {_summary_columns('j')}, COUNT(*) "
            "FROM jobs j JOIN tasks t ON t.job_id = j.job_id "
            f"WHERE j.state IN ({','.join('?' * len(_ACTIVE_STATES))}) "
            "AND t.state = 'pending' "
            "GROUP BY j.job_id ORDER BY j.rowid",
            _ACTIVE_STATES).fetchall()
        bands: dict[str, list[dict]] = {p: [] for p in PRIORITIES}
        for *job_row, pending in rows:
            job = _summary(*job_row)
            job["pending_tasks"] = pending
            band = bands.setdefault(job["priority"], [])
            if len(band) < limit_per_band:
                band.append(job)
        return bands

    def task_states(self) -> dict[str, int]:
        """How many tasks are in each state (for /metrics; one scan of the tasks table)."""
        counts = {s.value: 0 for s in TaskState}
        for state, n in self._db.execute(
                "SELECT state, COUNT(*) FROM tasks GROUP BY 1"):
            counts[state] = n
        return counts

    def _task_counts(self, job_ids: list[str]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for chunk in _chunks(job_ids, 500):
            marks = ",".join("?" * len(chunk))
            for job_id, state, n in self._db.execute(
                    f"SELECT job_id, state, COUNT(*) FROM tasks "
                    f"WHERE job_id IN ({marks}) GROUP BY 1, 2", chunk):
                out.setdefault(job_id, {})[state] = n
        return out


def _job_filter(q: JobQuery) -> tuple[str, list]:
    clauses: list[str] = []
    args: list = []
    if q.states:
        clauses.append(f"state IN ({','.join('?' * len(q.states))})")
        args += q.states
    if q.user:
        clauses.append("json_extract(spec, '$.user') = ?")
        args.append(q.user)
    if q.prefix:
        # A range on the primary key: the prefix filter uses the index instead of a scan.
        clauses.append("job_id >= ? AND job_id < ?")
        args += [q.prefix, q.prefix + "\U0010ffff"]
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), args


def _summary(job_id: str, state: str, finished_at: float | None, user: str,
             parent: str | None, priority: str, replicas: int, submitted_at: float,
             error: str | None, killed: int | None) -> dict[str, Any]:
    """A row of _SUMMARY_COLUMNS as the dict every page shows."""
    return {
        "job_id": job_id, "user": user, "parent": parent, "state": state,
        "error": error or "", "priority": priority, "replicas": replicas,
        "submitted_at": submitted_at, "finished_at": finished_at, "killed": bool(killed),
    }


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]
