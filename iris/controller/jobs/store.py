"""Durable job state: one SQLite file (WAL) in the controller's state directory. Not the decisions.

`apply` commits the kernel's Persist effects in ONE transaction, and only then may the caller
answer the submitter or act on the other effects, so an acknowledged submit or transition
survives a crash. `load` rebuilds the kernel state; `prune` drops finished jobs after a
retention period and gives the space back (Iris's controller was once wedged by a bloated
SQLite file), so the file stays bounded by the live jobs plus one retention window.

If `apply` raises (disk full, I/O error) the kernel's in-memory state is already ahead of the
file: the controller must not answer or act, but stop and reload (crash-only), so memory never
claims what the disk does not hold.

Startup: `prune(retention_s, now)`, then `load()`, then a Reconcile per worker as it re-registers
(and WorkerLost for those that never come back within the liveness timeout).

synchronous=FULL by default: in WAL mode NORMAL already survives a process crash (a commit is
in the OS page cache), but may lose the last commits on power loss or a kernel panic — and a
preemptible controller VM being reset is exactly that. FULL adds one fsync of the WAL per
commit; callers that handle bursts should pass several Persist effects to one `apply`
(group commit) rather than weaken durability.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgpack

from iris.base.errors import ConfigError, InvalidRequestError, NotFoundError, StorageError
from iris.controller.jobs import rows as task_rows
from iris.controller.jobs import usage_rows
from iris.controller.jobs.events import Persist
from iris.controller.jobs.model import Attempt, Job, Task
from iris.controller.jobs.spec import JobSpec
from iris.controller.jobs.state import KernelConfig, KernelState
from iris.wire.states import DB_NAME

# 2: the lineage table (where this state came from: restores and rollbacks of checkpoints).
# 3: attempt_usage (what each attempt used, its named ports) and job_notes (issue 31).
# 4: tasks and attempts as columns, not a JSON record per row (rows.py).
SCHEMA_VERSION = 4

_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, state TEXT NOT NULL, finished_at REAL,
    spec TEXT NOT NULL, payload BLOB NOT NULL, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
""" + task_rows.TASKS_TABLE + ";" + task_rows.ATTEMPTS_TABLE + """;
CREATE INDEX IF NOT EXISTS attempts_job ON attempts (job_id);
CREATE TABLE IF NOT EXISTS results (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (job_id, idx));
CREATE TABLE IF NOT EXISTS requests (request_id TEXT PRIMARY KEY, job_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS requests_job ON requests (job_id);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY, event_id TEXT NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS events_at ON events (at);
CREATE TABLE IF NOT EXISTS event_log (
    seq INTEGER PRIMARY KEY, at REAL NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS event_log_at ON event_log (at);
CREATE TABLE IF NOT EXISTS stopping (
    attempt_id TEXT PRIMARY KEY, worker_id TEXT NOT NULL, hold TEXT NOT NULL,
    grace_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS replay_base (
    id INTEGER PRIMARY KEY CHECK (id = 1), upto_seq INTEGER NOT NULL, at REAL NOT NULL,
    body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS lineage (
    seq INTEGER PRIMARY KEY, at REAL NOT NULL, what TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS budgets (subject TEXT PRIMARY KEY, record TEXT NOT NULL);
""" + usage_rows.SCHEMA


def _v1_to_v2(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS lineage (seq INTEGER PRIMARY KEY, at REAL NOT NULL, "
               "what TEXT NOT NULL, detail TEXT NOT NULL)")


def _v2_to_v3(db: sqlite3.Connection) -> None:
    for statement in filter(str.strip, usage_rows.SCHEMA.split(";")):
        db.execute(statement)


# version -> the step to the next one. Opening an older file runs the steps in one
# transaction; a file from a newer Iris is refused before anything in it is touched.
_MIGRATIONS = {1: _v1_to_v2, 2: _v2_to_v3, 3: task_rows.v3_to_v4}

# A job's row is written whole once; later writes change its state and record only, so the
# spec is not encoded again for each (~10 µs a write, several writes a job).
_JOB_UPDATE = "UPDATE jobs SET state = ?, finished_at = ?, record = ? WHERE job_id = ?"
_JOB_INSERT = """
INSERT INTO jobs (job_id, state, finished_at, spec, payload, record) VALUES (?, ?, ?, ?, ?, ?)"""


@dataclass(frozen=True)
class StoreConfig:
    synchronous: str = "FULL"
    """FULL: a commit survives power loss (see the module docstring); NORMAL: process crash only."""
    busy_timeout_ms: int = 5_000
    """How long to wait on a lock held by another connection (e.g. an operator's sqlite3 shell)."""


class JobStore:
    """The controller's SQLite file. One owner at a time; calls must not overlap."""

    def __init__(self, state_dir: str | Path, config: StoreConfig | None = None):
        self.config = config or StoreConfig()
        if self.config.synchronous not in ("NORMAL", "FULL", "EXTRA"):
            raise ConfigError(f"synchronous: expected NORMAL, FULL or EXTRA, "
                              f"got {self.config.synchronous!r}")
        self.path = Path(state_dir) / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None,
                                       check_same_thread=False)
            self._setup()
        except BaseException as exc:
            if hasattr(self, "_db"):
                self._db.close()
            if not isinstance(exc, sqlite3.Error):
                raise
            raise StorageError(f"cannot open job store {self.path}: {exc}") from exc

    def _setup(self) -> None:
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {int(self.config.busy_timeout_ms)}")
        version = _schema_version(db)
        if version > SCHEMA_VERSION:  # refused before anything in the file is changed
            raise StorageError(f"{self.path}: schema version {version} was written by a newer "
                               f"Iris; this controller reads up to {SCHEMA_VERSION} (upgrade "
                               "Iris, or restore an older checkpoint)")
        # auto_vacuum only takes effect on a new file, before the first table exists.
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StorageError(f"{self.path}: could not switch to WAL (got {mode})")
        db.execute(f"PRAGMA synchronous = {self.config.synchronous}")
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(_META)
            for step in range(version, SCHEMA_VERSION):
                _MIGRATIONS[step](db)
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                       (str(SCHEMA_VERSION),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.migrated_from = version if version != SCHEMA_VERSION else None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def apply(self, persists: Persist | Iterable[Persist],
              log: Iterable[tuple[float, str, bytes]] = (),
              usage: Iterable[usage_rows.Row] = (),
              stops: Iterable[tuple[str, str, dict, float]] = ()) -> None:
        """Commit one or more Persist effects atomically, with the events that made them
        (`log`: (at, kind, body) rows of jobs/event_log.py, for replay), what attempts
        reported using (`usage`, controller/usage.py: no fsync of its own) and the stops
        they send (`stops`, as `save_stops` takes them); return only once committed."""
        batch = [persists] if isinstance(persists, Persist) else list(persists)
        stops = list(stops)
        if not batch and not stops:
            self.put_usage(usage)
            return
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                for p in batch:
                    self._write(p)
                db.executemany("INSERT INTO event_log (at, kind, body) VALUES (?, ?, ?)", log)
                db.executemany("INSERT OR REPLACE INTO stopping VALUES (?, ?, ?, ?)",
                               [(a, w, json.dumps(h), g) for a, w, h, g in stops])
                usage_rows.write(db, usage)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except (sqlite3.Error, TypeError, ValueError, OverflowError) as exc:
            if _data_error(exc):
                # The data, not the disk: a value SQLite cannot bind or JSON cannot encode.
                # Rolled back; the request that brought it fails alone.
                raise InvalidRequestError(f"cannot be stored: {exc}") from exc
            raise StorageError(f"job store commit failed: {exc}") from exc

    def _write(self, p: Persist) -> None:
        db = self._db
        for job_id in p.deleted_jobs:
            self._delete_job(job_id)
        for job in p.jobs:
            spec, record = job.spec, json.dumps(job.to_dict())
            if not db.execute(_JOB_UPDATE, (job.state.value, job.finished_at, record,
                                            job.job_id)).rowcount:
                db.execute(_JOB_INSERT, (job.job_id, job.state.value, job.finished_at,
                                         json.dumps(spec.to_dict()), spec.entrypoint.payload,
                                         record))
            if spec.request_id:
                db.execute("INSERT OR IGNORE INTO requests VALUES (?, ?)",
                           (spec.request_id, job.job_id))
        db.executemany(task_rows.INSERT_TASK, [task_rows.task_row(t) for t in p.tasks])
        db.executemany(task_rows.INSERT_ATTEMPT, [task_rows.attempt_row(a) for a in p.attempts])
        db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?)", p.results)
        db.execute("INSERT INTO events (event_id, kind, at) VALUES (?, ?, ?)",
                   (p.event_id, p.kind, p.at))

    def _delete_job(self, job_id: str) -> None:
        for table in ("jobs", "tasks", "attempts", "results", "requests",
                      *usage_rows.TABLES):
            self._db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))

    def load(self, config: KernelConfig | None = None) -> KernelState:
        """The kernel state as last committed."""
        db = self._db
        jobs = [Job.from_dict(JobSpec.from_dict(json.loads(spec), payload), json.loads(rec))
                for spec, payload, rec in db.execute("SELECT spec, payload, record FROM jobs")]
        tasks = [task_rows.task_of(r)
                 for r in db.execute(f"SELECT {task_rows.TASK_COLUMNS} FROM tasks")]
        attempts = [task_rows.attempt_of(r)
                    for r in db.execute(f"SELECT {task_rows.ATTEMPT_COLUMNS} FROM attempts")]
        return KernelState.from_records(jobs, tasks, attempts, config)

    def result(self, job_id: str, index: int) -> bytes | None:
        """A task's stored return value (pickled), None if it has none (yet)."""
        if self._db.execute("SELECT 1 FROM tasks WHERE job_id = ? AND idx = ?",
                            (job_id, index)).fetchone() is None:
            raise NotFoundError(f"no task {job_id}[{index}]")
        row = self._db.execute("SELECT data FROM results WHERE job_id = ? AND idx = ?",
                               (job_id, index)).fetchone()
        return row[0] if row else None

    def results(self, job_id: str) -> dict[int, bytes]:
        """Every stored return value of a job, by task index."""
        rows = self._db.execute("SELECT idx, data FROM results WHERE job_id = ?", (job_id,))
        return dict(rows.fetchall())

    def job_for_request(self, request_id: str) -> str | None:
        row = self._db.execute("SELECT job_id FROM requests WHERE request_id = ?",
                               (request_id,)).fetchone()
        return row[0] if row else None

    def event_ids(self, limit: int = 1000) -> list[tuple[str, str, float]]:
        """The latest committed events (id, kind, at), oldest first, for replay and debugging."""
        rows = self._db.execute("SELECT event_id, kind, at FROM events ORDER BY seq DESC "
                                "LIMIT ?", (limit,)).fetchall()
        return rows[::-1]

    def logged_events(self) -> list[tuple[float, str, bytes]]:
        """Every logged event (at, kind, body) after the replay base, oldest first: what
        event_log.replay takes, with `replay_base()`."""
        return self._db.execute("SELECT at, kind, body FROM event_log ORDER BY seq").fetchall()

    def replay_base(self) -> tuple[list[Job], list[Task], list[Attempt]] | None:
        """The records the logged events start from (None: from nothing)."""
        row = self._db.execute("SELECT body FROM replay_base WHERE id = 1").fetchone()
        if row is None:
            return None
        base = msgpack.unpackb(row[0], raw=False)
        return ([Job.from_dict(JobSpec.from_dict(json.loads(spec), b""), json.loads(rec))
                 for spec, rec in base["jobs"]],
                [Task.from_dict(json.loads(r)) for r in base["tasks"]],
                [Attempt.from_dict(json.loads(r)) for r in base["attempts"]])

    # ------------------------------------------------------------ stops in flight (stops.py)

    def save_stops(self, held: Iterable[tuple[str, str, dict, float]] = (),
                   gone: Iterable[str] = (), workers_gone: Iterable[str] = ()) -> None:
        """Attempts told to stop (attempt, worker, resources held, grace) and those gone: a
        restarted controller keeps a requeued task waiting until its old attempt exits."""
        try:
            with self._db:  # one transaction (the connection is in autocommit otherwise)
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO stopping VALUES (?, ?, ?, ?)",
                                     [(a, w, json.dumps(h), g) for a, w, h, g in held])
                self._db.executemany("DELETE FROM stopping WHERE attempt_id = ?",
                                     [(a,) for a in gone])
                self._db.executemany("DELETE FROM stopping WHERE worker_id = ?",
                                     [(w,) for w in workers_gone])
        except sqlite3.Error as exc:
            raise StorageError(f"saving stops in flight: {exc}") from exc

    def load_stops(self) -> list[tuple[str, str, dict, float]]:
        rows = self._db.execute("SELECT attempt_id, worker_id, hold, grace_s FROM stopping")
        return [(a, w, json.loads(h), g) for a, w, h, g in rows]

    def logged_count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM event_log").fetchone()[0]

    def compact_event_log(self, now: float) -> int:
        """Fold the event log into a new replay base: the records as committed now, which
        are what replaying the log gives; then the log restarts empty. So the file stays
        bounded while `replay(base + log)` still rebuilds the state exactly. Returns how
        many log rows went."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                gone = self._fold_log(now)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"folding the event log: {exc}") from exc
        return gone

    def _fold_log(self, now: float) -> int:
        """Inside a write transaction: the records as committed become the replay base and
        the log restarts empty; how many log rows went."""
        db = self._db
        upto = db.execute("SELECT COALESCE(MAX(seq), 0) FROM event_log").fetchone()[0]
        body = msgpack.packb({
            "jobs": db.execute("SELECT spec, record FROM jobs ORDER BY job_id").fetchall(),
            # JSON records, as before schema 4: the replay base's form is unchanged.
            "tasks": [json.dumps(task_rows.task_of(r).to_dict()) for r in db.execute(
                f"SELECT {task_rows.TASK_COLUMNS} FROM tasks")],
            "attempts": [json.dumps(task_rows.attempt_of(r).to_dict()) for r in db.execute(
                f"SELECT {task_rows.ATTEMPT_COLUMNS} FROM attempts")],
        }, use_bin_type=True)
        db.execute("INSERT OR REPLACE INTO replay_base (id, upto_seq, at, body) "
                   "VALUES (1, ?, ?, ?)", (upto, now, body))
        return db.execute("DELETE FROM event_log").rowcount

    def prune(self, retention_s: float, now: float) -> int:
        """Delete jobs finished more than `retention_s` before `now` (and event ids older
        than that; the event log is folded into its replay base), then return the freed
        pages to the file system. Returns how many jobs went.

        Run it while the kernel state is not loaded, or after the kernel's own Prune event,
        so memory and disk agree."""
        cutoff = now - retention_s
        db = self._db
        old = [r[0] for r in db.execute(
            "SELECT job_id FROM jobs WHERE finished_at IS NOT NULL AND finished_at <= ?",
            (cutoff,))]
        db.execute("BEGIN IMMEDIATE")
        try:
            for job_id in old:
                self._delete_job(job_id)
            db.execute("DELETE FROM events WHERE at <= ?", (cutoff,))
            if old:  # replay must not meet events of jobs it never saw submitted
                self._fold_log(now)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.compact()
        return len(old)

    def compact(self) -> None:
        """Give free pages back and truncate the WAL, so the files shrink after deletes."""
        self._db.execute("PRAGMA incremental_vacuum")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def record_lineage(self, what: str, detail: dict, at: float) -> None:
        """Note where this state came from (a restore, a rollback); kept across checkpoints."""
        self._db.execute("INSERT INTO lineage (at, what, detail) VALUES (?, ?, ?)",
                         (at, what, json.dumps(detail, sort_keys=True)))

    def lineage(self) -> list[dict]:
        rows = self._db.execute("SELECT at, what, detail FROM lineage ORDER BY seq").fetchall()
        return [{"at": at, "what": what, **json.loads(detail)} for at, what, detail in rows]

    def put_budget(self, subject: str, record: dict | None) -> None:
        """An operator's budget for a user or group (controller/budgets.py); None deletes it.
        (A table created by IF NOT EXISTS on open: older files gain it without a migration.)"""
        try:
            if record is None:
                self._db.execute("DELETE FROM budgets WHERE subject = ?", (subject,))
            else:
                self._db.execute("INSERT OR REPLACE INTO budgets VALUES (?, ?)",
                                 (subject, json.dumps(record, sort_keys=True)))
        except sqlite3.Error as exc:
            raise StorageError(f"job store: cannot write the budget of {subject}: {exc}") \
                from exc

    # ------------------------------------------------------------ usage and notes (usage_rows)

    def put_usage(self, rows: Iterable[usage_rows.Row]) -> None:
        """Attempts' usage rows in one transaction of their own (what `apply` did not take)."""
        rows = list(rows)
        if rows:
            self._own_transaction(lambda db: usage_rows.write(db, rows), "usage")

    def usage_of(self, job_id: str) -> dict[str, usage_rows.Stored]:
        """attempt id -> what is stored of its usage, for one job."""
        return usage_rows.read(self._db, job_id)

    def usage_series(self, attempt_id: str) -> bytes | None:
        return usage_rows.series(self._db, attempt_id)

    def add_note(self, job_id: str, at: float, kind: str, detail: dict) -> None:
        """Something done to a job from outside its code (an exec into a task): kept with
        the job, shown in its summary, pruned with it."""
        self._own_transaction(lambda db: usage_rows.add_note(db, job_id, at, kind, detail),
                              "a note")

    def notes(self, job_id: str) -> list[dict]:
        return usage_rows.notes(self._db, job_id)

    def _own_transaction(self, write, what: str) -> None:
        try:
            with self._db:
                self._db.execute("BEGIN")
                write(self._db)
        except sqlite3.Error as exc:
            raise StorageError(f"job store: cannot write {what}: {exc}") from exc

    def budget_records(self) -> dict[str, dict]:
        rows = self._db.execute("SELECT subject, record FROM budgets").fetchall()
        return {subject: json.loads(record) for subject, record in rows}

    def counts(self) -> dict[str, int]:
        tables = ("jobs", "tasks", "attempts", "results", "requests", "events")
        return {t: self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}

    def size_bytes(self) -> int:
        """Database plus WAL on disk."""
        wal = self.path.with_name(self.path.name + "-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def _schema_version(db: sqlite3.Connection) -> int:
    """The file's schema version; a new, empty file is the current one."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone() is None:
        return SCHEMA_VERSION
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return SCHEMA_VERSION if row is None else int(row[0])


def _data_error(exc: BaseException) -> bool:
    """A value that cannot be stored (vs the disk or the database failing)."""
    if isinstance(exc, TypeError | ValueError | OverflowError | sqlite3.InterfaceError
                  | sqlite3.IntegrityError):
        return True
    text = str(exc)  # binding a dict: ProgrammingError "Error binding parameter ..."
    return isinstance(exc, sqlite3.ProgrammingError) and ("binding" in text
                                                          or "not supported" in text)
