"""Tasks and attempts stored as columns (schema 4, jobs/rows.py): a store of schema 3, with
a JSON record per task and attempt row, opens migrated to the same state; the dashboard's
reader names the same columns."""

from __future__ import annotations

import json
import sqlite3

from iris.controller.jobs import events as ev
from iris.controller.jobs import rows
from iris.controller.jobs.store import SCHEMA_VERSION, JobStore
from iris.dashboard import reads
from iris.wire.states import DB_NAME
from tests.controller.test_job_support import Harness, snapshot, spec

_V3_TABLES = """
CREATE TABLE tasks (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)) WITHOUT ROWID;
CREATE TABLE attempts (
    attempt_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, record TEXT NOT NULL);
CREATE INDEX attempts_job ON attempts (job_id)"""


def _some_state(store: JobStore) -> Harness:
    h = Harness(store=store)
    done = h.submit(spec("done", replicas=2))
    h.exit(h.run(done, 0), result=b"r")
    h.exit(h.run(done, 1, "w2"), code=3, error="boom")
    tpu = h.submit(spec("tpu", resources={"tpu": "v5litepod-16"}))
    h.send(ev.Assign(h.eid(), tuple(ev.Placement(tpu, i, f"t{i}", f"att-t{i}", "v5litepod-16")
                                    for i in range(4))))
    h.submit(spec("waits", replicas=3))
    return h


def _as_schema_3(path, drop_field: str) -> None:
    """The store's tasks and attempts as schema 3 kept them; the records of tasks holding
    `drop_field`'s default written without it (as before the field existed)."""
    with JobStore(path) as store:
        state = store.load()
        db = store._db
        db.execute("DROP TABLE tasks")
        db.execute("DROP TABLE attempts")
        for statement in _V3_TABLES.split(";"):
            db.execute(statement)
        for t in state.tasks.values():
            record = t.to_dict()
            if not record[drop_field]:
                del record[drop_field]
            db.execute("INSERT INTO tasks VALUES (?, ?, ?)", (t.job_id, t.index,
                                                              json.dumps(record)))
        for a in state.attempts.values():
            db.execute("INSERT INTO attempts VALUES (?, ?, ?)",
                       (a.attempt_id, a.job_id, json.dumps(a.to_dict())))
        db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")


def test_a_schema_3_store_opens_migrated_to_columns_with_the_same_state(tmp_path):
    with JobStore(tmp_path) as store:
        h = _some_state(store)
        before = snapshot(store.load())
    assert before == snapshot(h.state) and before["attempts"]
    _as_schema_3(tmp_path, "has_result")  # its default: False, as schema 3 read it
    with JobStore(tmp_path) as store:
        assert store.migrated_from == 3
        assert snapshot(store.load()) == before
        columns = {r[1] for r in store._db.execute("PRAGMA table_info(tasks)")}
        assert "record" not in columns and "state" in columns
        indexes = {r[1] for r in store._db.execute("PRAGMA index_list(attempts)")}
        assert "attempts_job" in indexes
    db = sqlite3.connect(tmp_path / DB_NAME)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] \
        == str(SCHEMA_VERSION) == "4"
    db.close()


def test_rows_round_trip_and_the_dashboard_names_the_same_columns(tmp_path):
    with JobStore(tmp_path) as store:
        h = _some_state(store)
    for t in h.state.tasks.values():
        assert rows.task_of(rows.task_row(t)) == t
    for a in h.state.attempts.values():
        assert rows.attempt_of(rows.attempt_row(a)) == a
    assert reads._TASK_FIELDS == rows.TASK_FIELDS
    assert reads._ATTEMPT_FIELDS == rows.ATTEMPT_FIELDS
    assert (reads._TASK_COLUMNS, reads._ATTEMPT_COLUMNS) == (rows.TASK_COLUMNS,
                                                            rows.ATTEMPT_COLUMNS)
