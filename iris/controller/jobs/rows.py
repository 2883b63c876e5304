"""Tasks and attempts as rows of columns in the job store (schema 4), and the step from the
JSON record per row of schemas 1-3. Pure but for the migration, which runs in the store's
opening transaction.

A column per field instead of `json.dumps(record.to_dict())`: a task or attempt row cost
~5 µs of encoding where a tuple of its fields costs ~1 (each gang job writes ~20 such rows).
The columns are the records' fields in order (`index` is `idx`, a state its value, a flag
0/1), so a row is `record_row(r)` one way and `task_of` / `attempt_of` the other.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields

from iris.controller.jobs.model import Attempt, Task, TaskState

TASKS_TABLE = """
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL, attempt_id TEXT,
    attempts INTEGER NOT NULL, failures INTEGER NOT NULL, preemptions INTEGER NOT NULL,
    pending_since REAL, finished_at REAL, error TEXT NOT NULL, has_result INTEGER NOT NULL,
    PRIMARY KEY (job_id, idx)) WITHOUT ROWID"""
ATTEMPTS_TABLE = """
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, task_index INTEGER NOT NULL,
    number INTEGER NOT NULL, worker_id TEXT NOT NULL, state TEXT NOT NULL,
    assigned_at REAL NOT NULL, started_at REAL, finished_at REAL, exit_code INTEGER,
    error TEXT NOT NULL, accelerator TEXT)"""

TASK_FIELDS = tuple(f.name for f in fields(Task))
ATTEMPT_FIELDS = tuple(f.name for f in fields(Attempt))
_TASK_STATE = TASK_FIELDS.index("state")
_HAS_RESULT = TASK_FIELDS.index("has_result")
_ATTEMPT_STATE = ATTEMPT_FIELDS.index("state")

TASK_COLUMNS = ", ".join(("job_id", "idx", *TASK_FIELDS[2:]))
ATTEMPT_COLUMNS = ", ".join(ATTEMPT_FIELDS)
INSERT_TASK = (f"INSERT OR REPLACE INTO tasks ({TASK_COLUMNS}) "
               f"VALUES ({', '.join('?' * len(TASK_FIELDS))})")
INSERT_ATTEMPT = (f"INSERT OR REPLACE INTO attempts ({ATTEMPT_COLUMNS}) "
                  f"VALUES ({', '.join('?' * len(ATTEMPT_FIELDS))})")


def task_row(t: Task) -> tuple:
    return (t.job_id, t.index, t.state.value, t.attempt_id, t.attempts, t.failures,
            t.preemptions, t.pending_since, t.finished_at, t.error, t.has_result)


def attempt_row(a: Attempt) -> tuple:
    return (a.attempt_id, a.job_id, a.task_index, a.number, a.worker_id, a.state.value,
            a.assigned_at, a.started_at, a.finished_at, a.exit_code, a.error, a.accelerator)


def task_of(row: tuple) -> Task:
    values = list(row)
    values[_TASK_STATE] = TaskState(values[_TASK_STATE])
    values[_HAS_RESULT] = bool(values[_HAS_RESULT])
    return Task(*values)


def attempt_of(row: tuple) -> Attempt:
    values = list(row)
    values[_ATTEMPT_STATE] = TaskState(values[_ATTEMPT_STATE])
    return Attempt(*values)


def v3_to_v4(db: sqlite3.Connection) -> None:
    """The JSON record of each task and attempt as columns. Records are read the way
    schema 3's `load` read them (`from_dict`: a field an older record lacks takes its
    default), so the state loaded after the step is the state loaded before it."""
    for table, create, of_dict, to_row, insert in (
            ("tasks", TASKS_TABLE, Task.from_dict, task_row, INSERT_TASK),
            ("attempts", ATTEMPTS_TABLE, Attempt.from_dict, attempt_row, INSERT_ATTEMPT)):
        columns = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if "record" not in columns:
            continue  # made in the new form already (or never made: the schema makes it)
        records = [of_dict(json.loads(r)) for (r,) in db.execute(f"SELECT record FROM {table}")]
        db.execute("DROP INDEX IF EXISTS attempts_job")  # made again on the new table
        db.execute(f"DROP TABLE {table}")
        db.execute(create)
        db.executemany(insert, [to_row(r) for r in records])
