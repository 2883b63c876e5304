"""The job store's tables for looking inside jobs (issue 31): what each attempt used and its
named ports (`attempt_usage`), and what was done to a job from outside (`job_notes`: an
exec into a task). SQL only; the store (store.py) owns the connection and transactions.

Both are keyed by job and go when the job goes (`TABLES`, in store._delete_job): pruned
with it, replaced with it. A note per job is bounded too (MAX_NOTES, oldest dropped), so an
exec loop cannot grow the file without bound.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempt_usage (
    attempt_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, ports TEXT, totals TEXT, series BLOB);
CREATE INDEX IF NOT EXISTS attempt_usage_job ON attempt_usage (job_id);
CREATE TABLE IF NOT EXISTS job_notes (
    seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL,
    detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS job_notes_job ON job_notes (job_id, seq);
"""
TABLES = ("attempt_usage", "job_notes")
# Notes kept per job: an operator reads the last few; 200 execs is a long debugging day.
MAX_NOTES = 200

_UPSERT = """
INSERT INTO attempt_usage (attempt_id, job_id, ports, totals, series) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (attempt_id) DO UPDATE SET
    ports = COALESCE(excluded.ports, ports), totals = COALESCE(excluded.totals, totals),
    series = COALESCE(excluded.series, series)"""


@dataclass(frozen=True)
class Row:
    """One attempt's row to write; a None column keeps what is stored."""

    attempt_id: str
    job_id: str
    ports: dict | None = None
    totals: dict | None = None
    series: bytes | None = None  # msgpack of the points (controller/usage.py)


@dataclass(frozen=True)
class Stored:
    ports: dict | None
    totals: dict | None
    series: bytes | None


def write(db: sqlite3.Connection, rows: Iterable[Row]) -> None:
    db.executemany(_UPSERT, [(r.attempt_id, r.job_id, _json(r.ports), _json(r.totals),
                              r.series) for r in rows])


def read(db: sqlite3.Connection, job_id: str) -> dict[str, Stored]:
    """Ports and totals of a job's attempts; not their series (`series`, one at a time: a
    job of 4,096 tasks would otherwise read megabytes to show a few charts)."""
    rows = db.execute("SELECT attempt_id, ports, totals FROM attempt_usage WHERE job_id = ?",
                      (job_id,)).fetchall()
    return {a: Stored(_load(p), _load(t), None) for a, p, t in rows}


def series(db: sqlite3.Connection, attempt_id: str) -> bytes | None:
    row = db.execute("SELECT series FROM attempt_usage WHERE attempt_id = ?",
                     (attempt_id,)).fetchone()
    return row[0] if row else None


def add_note(db: sqlite3.Connection, job_id: str, at: float, kind: str, detail: dict) -> None:
    db.execute("INSERT INTO job_notes (job_id, at, kind, detail) VALUES (?, ?, ?, ?)",
               (job_id, at, kind, json.dumps(detail, sort_keys=True)))
    db.execute("DELETE FROM job_notes WHERE job_id = ? AND seq NOT IN (SELECT seq FROM "
               "job_notes WHERE job_id = ? ORDER BY seq DESC LIMIT ?)",
               (job_id, job_id, MAX_NOTES))


def notes(db: sqlite3.Connection, job_id: str) -> list[dict]:
    rows = db.execute("SELECT at, kind, detail FROM job_notes WHERE job_id = ? ORDER BY seq",
                      (job_id,)).fetchall()
    return [{"at": at, "kind": kind, **json.loads(detail)} for at, kind, detail in rows]


def _json(value: dict | None) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _load(text: str | None) -> dict | None:
    return None if text is None else json.loads(text)
