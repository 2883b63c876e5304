"""The dashboard's read-only view of the job store: it cannot write, and a reader in the middle
of a read never holds up the controller's commits (SQLite WAL)."""

from __future__ import annotations

import sqlite3

import pytest

import iris
from iris.base.errors import InvalidRequestError, StorageError
from iris.dashboard.reads import JobQuery, JobReader


@pytest.fixture
def idle_cluster(tmp_path):
    """No workers: submitted jobs stay pending; the store is <tmp_path>/controller."""
    with iris.local_cluster(workers=0, state_dir=tmp_path) as ctx:
        yield ctx, tmp_path / "controller"


def test_reader_open_read_transaction_does_not_block_controller_commits(idle_cluster):
    _, state_dir = idle_cluster
    first = iris.submit(["true"], name="before-read")
    reader = JobReader(state_dir)
    try:
        cursor = reader._db.execute("SELECT job_id FROM jobs")  # a read left half done
        assert cursor.fetchone() == (first.job_id,)
        second = iris.submit(["true"], name="during-read")  # the controller commits
        assert second.status()["state"] == "pending"
        cursor.close()
        page = reader.jobs(JobQuery(sort="name", descending=False))
        assert [j["job_id"] for j in page["jobs"]] == [first.job_id, second.job_id]
    finally:
        reader.close()


def test_reader_cannot_write_the_store(idle_cluster):
    _, state_dir = idle_cluster
    iris.submit(["true"], name="kept")
    reader = JobReader(state_dir)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
            reader._db.execute("DELETE FROM jobs")
        assert reader.jobs(JobQuery())["total"] == 1
    finally:
        reader.close()


def test_reader_on_a_directory_without_a_store_names_the_path(tmp_path):
    with pytest.raises(StorageError, match=str(tmp_path)):
        JobReader(tmp_path)


def test_job_query_refuses_bad_input_naming_the_field():
    with pytest.raises(InvalidRequestError, match="per_page") as info:
        JobQuery(per_page=0)
    assert info.value.field == "per_page"
