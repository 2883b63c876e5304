"""Checkpoints of a real job store to a real fake-gcs-server, through the real client: a copy
is consistent while the store is written, a restore gives back what was committed, bad
checkpoints are refused with the state dir untouched, and old schemas migrate."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import pytest

from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import NotFoundError, StorageError
from iris.controller.checkpoint import policy
from iris.controller.checkpoint.archive import encode_manifest
from iris.controller.checkpoint.bucket import CheckpointBucket
from iris.controller.checkpoint.policy import PolicyConfig
from iris.controller.checkpoint.restore import prepare
from iris.controller.checkpoint.runner import Checkpointer
from iris.controller.jobs.store import SCHEMA_VERSION, JobStore
from iris.wire.states import DB_NAME
from tests.controller.test_job_support import Harness, snapshot, spec
from tests.logstore.conftest import FakeGcs

pytestmark = pytest.mark.timeout(300)


def _store_with_jobs(state_dir: Path, n: int) -> tuple[JobStore, Harness]:
    store = JobStore(state_dir)
    h = Harness(store=store)
    for i in range(n):
        h.submit(spec(f"job{i}", request_id=f"req-{i}"))
    return store, h


def _take(state_dir: Path, bucket: CheckpointBucket, **config) -> dict:
    done: list[dict] = []
    runner = Checkpointer(state_dir, bucket, PolicyConfig(**config), SYSTEM_CLOCK,
                          lambda result, ticket: done.append(result))
    result = runner.take("test")
    assert "error" not in result, result
    return result


def _digest(state_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(state_dir.iterdir()) if p.is_file()}


def test_checkpoint_restore_on_a_new_dir_gives_back_every_committed_job(tmp_path, bucket):
    store, h = _store_with_jobs(tmp_path / "old", 25)
    h.run("/alice/job3")
    expected = snapshot(h.state)
    taken = _take(tmp_path / "old", bucket)
    store.close()
    assert taken["jobs"] == 25 and taken["bytes"] < taken["db_bytes"]  # compressed

    line = prepare(tmp_path / "new", bucket, None, SYSTEM_CLOCK.wall())
    assert line.startswith(f"controller restored checkpoint {taken['name']}")
    assert "25 jobs" in line
    with JobStore(tmp_path / "new") as restored:
        assert snapshot(restored.load()) == expected
        assert restored.job_for_request("req-7") == "/alice/job7"
        assert restored.lineage()[-1]["checkpoint"] == taken["name"]


def test_checkpoint_carries_the_role_tokens(tmp_path, bucket):
    from iris.actors import tokens

    store, _ = _store_with_jobs(tmp_path / "old", 1)
    member = tokens.load_or_create(tmp_path / "old" / tokens.CLUSTER_TOKEN_FILE)
    _take(tmp_path / "old", bucket)
    store.close()
    prepare(tmp_path / "new", bucket, "latest", SYSTEM_CLOCK.wall())
    assert tokens.read(tmp_path / "new" / tokens.CLUSTER_TOKEN_FILE) == member


def test_checkpoint_is_consistent_while_the_store_is_being_written(tmp_path, bucket):
    """A writer commits jobs in a loop during the checkpoint: the copy holds exactly the
    jobs of one committed moment (every job whose Submit event it holds, and no other)."""
    store, h = _store_with_jobs(tmp_path / "old", 200)
    stop = threading.Event()
    written = [200]

    def write() -> None:
        while not stop.is_set():
            h.submit(spec(f"late{written[0]}"))
            written[0] += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        taken = _take(tmp_path / "old", bucket)
    finally:
        stop.set()
        writer.join()
    store.close()
    assert 200 <= taken["jobs"] <= written[0]
    prepare(tmp_path / "new", bucket, "latest", SYSTEM_CLOCK.wall())
    db = sqlite3.connect(tmp_path / "new" / DB_NAME)
    jobs = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    submits = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'Submit'").fetchone()[0]
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    assert jobs == submits == taken["jobs"]


def test_checkpoint_names_are_create_only(tmp_path, bucket):
    store, _ = _store_with_jobs(tmp_path / "old", 1)
    taken = _take(tmp_path / "old", bucket)
    store.close()
    archive = tmp_path / "a.tar.gz"
    manifest = bucket.get(taken["name"], archive)
    with pytest.raises(StorageError, match="already exists.*another controller"):
        bucket.put(archive, manifest)


def test_runner_takes_one_after_a_burst_and_prunes_to_the_rule(tmp_path, bucket):
    store, h = _store_with_jobs(tmp_path / "s", 1)
    results: list[dict] = []
    got = threading.Condition()

    def on_done(result: dict, ticket: int) -> None:
        with got:
            results.append(result)
            got.notify_all()

    runner = Checkpointer(tmp_path / "s", bucket, PolicyConfig(
        interval_s=3600, after_changes=5, min_gap_s=0, keep=2, keep_days=0),
        SYSTEM_CLOCK, on_done).start()
    try:
        for round_ in range(3):
            with got:
                assert got.wait_for(lambda r=round_: len(results) > r, timeout=60)
            for i in range(5):  # a burst: due again without waiting for the hour
                h.submit(spec(f"r{round_}-{i}"))
        with got:
            assert got.wait_for(lambda: len(results) >= 4, timeout=60)
    finally:
        runner.stop()
        store.close()
    assert [r.get("why") for r in results[:4]] == ["interval", "burst", "burst", "burst"]
    listed = [m["name"] for m in bucket.list()]
    assert len(listed) == 2 and listed[-1] == results[-1]["name"]


def test_runner_request_is_answered_by_a_checkpoint_that_started_after_it(tmp_path, bucket):
    store, h = _store_with_jobs(tmp_path / "s", 3)
    answered: list[tuple[dict, int]] = []
    got = threading.Event()

    def on_done(result: dict, ticket: int) -> None:
        answered.append((result, ticket))
        if ticket >= 1:
            got.set()

    runner = Checkpointer(tmp_path / "s", bucket, PolicyConfig(interval_s=3600),
                          SYSTEM_CLOCK, on_done).start()
    try:
        h.submit(spec("acknowledged"))
        ticket = runner.request()
        assert got.wait(60)
    finally:
        runner.stop()
        store.close()
    result, covered = next((r, t) for r, t in answered if t >= ticket)
    assert result["jobs"] == 4  # the job acknowledged before the request is in it


# ------------------------------------------------------------ bad input: state untouched


def _restore_refused(tmp_path, bucket, choice, match, exc=StorageError):
    local, _ = _store_with_jobs(tmp_path / "current", 2)
    local.close()
    before = _digest(tmp_path / "current")
    with pytest.raises(exc, match=match):
        prepare(tmp_path / "current", bucket, choice, SYSTEM_CLOCK.wall())
    assert _digest(tmp_path / "current") == before
    assert sorted(p.name for p in (tmp_path / "current").iterdir()) == sorted(before)


def _rewrite(bucket: CheckpointBucket, name: str, data: bytes, manifest: dict) -> None:
    blob = bucket._bucket.blob(f"{bucket.root}{name}/state.tar.gz")
    blob.delete()

    blob.metadata = {"manifest": encode_manifest(manifest)}
    blob.upload_from_string(data)


def _one_checkpoint(tmp_path, bucket) -> tuple[str, bytes, dict]:
    store, _ = _store_with_jobs(tmp_path / "source", 3)
    taken = _take(tmp_path / "source", bucket)
    store.close()
    archive = tmp_path / "got.tar.gz"
    manifest = bucket.get(taken["name"], archive)
    return taken["name"], archive.read_bytes(), manifest


def test_restore_corrupt_checkpoint_refused_and_state_untouched(tmp_path, bucket):
    name, data, manifest = _one_checkpoint(tmp_path, bucket)
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0xFF
    _rewrite(bucket, name, bytes(flipped), manifest)
    _restore_refused(tmp_path, bucket, name, "corrupt: its sha256 does not match")


def test_restore_truncated_checkpoint_refused_and_state_untouched(tmp_path, bucket):
    name, data, manifest = _one_checkpoint(tmp_path, bucket)
    _rewrite(bucket, name, data[: len(data) // 2], manifest)
    _restore_refused(tmp_path, bucket, "latest", "truncated or damaged")


def test_restore_checkpoint_with_matching_digest_but_garbage_inside_refused(tmp_path, bucket):
    """A checkpoint someone else wrote: its manifest agrees with its bytes, but they are not
    an archive of a job store."""
    name, _, manifest = _one_checkpoint(tmp_path, bucket)
    junk = b"not a tarball at all" * 100
    _rewrite(bucket, name, junk, {**manifest, "bytes": len(junk),
                                  "sha256": hashlib.sha256(junk).hexdigest()})
    _restore_refused(tmp_path, bucket, name, "cannot be read")


def test_restore_newer_schema_refused_and_state_untouched(tmp_path, bucket):
    store, _ = _store_with_jobs(tmp_path / "source", 2)
    store._db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                      (str(SCHEMA_VERSION + 1),))
    _take(tmp_path / "source", bucket)
    store.close()
    _restore_refused(tmp_path, bucket, "latest",
                     f"schema version {SCHEMA_VERSION + 1}; this controller reads up to "
                     f"{SCHEMA_VERSION}")


def test_restore_from_an_empty_prefix_is_an_error_when_asked_for(tmp_path, bucket):
    _restore_refused(tmp_path, bucket, "latest", "no checkpoint in gs://.*nothing to restore",
                     NotFoundError)


def test_restore_unknown_or_malformed_name_refused(tmp_path, bucket):
    _one_checkpoint(tmp_path, bucket)
    _restore_refused(tmp_path, bucket, "20200101T000000.000Z", "no checkpoint 2020",
                     NotFoundError)
    _restore_refused(tmp_path, bucket, "../../etc", "not a checkpoint name")


def test_serve_default_on_empty_prefix_starts_empty_and_says_so(tmp_path, bucket):
    line = prepare(tmp_path / "state", bucket, None, SYSTEM_CLOCK.wall())
    assert line.startswith("controller starting empty: no checkpoint in gs://")
    assert not (tmp_path / "state" / DB_NAME).exists()


def test_serve_default_keeps_a_local_store_and_no_restore_ignores_checkpoints(tmp_path, bucket):
    _one_checkpoint(tmp_path, bucket)
    local, _ = _store_with_jobs(tmp_path / "state", 1)
    local.close()
    before = _digest(tmp_path / "state")
    assert "using the job store in" in prepare(tmp_path / "state", bucket, None, 0.0)
    assert "--no-restore" in prepare(tmp_path / "state", bucket, "none", 0.0)
    assert _digest(tmp_path / "state") == before


def test_restore_over_a_local_store_moves_it_aside(tmp_path, bucket):
    name, _, _ = _one_checkpoint(tmp_path, bucket)
    local, _ = _store_with_jobs(tmp_path / "state", 7)
    local.close()
    before = _digest(tmp_path / "state")
    prepare(tmp_path / "state", bucket, name, SYSTEM_CLOCK.wall())
    aside = tmp_path / "state" / f"replaced-{name}"
    assert _digest(aside) == before
    with JobStore(tmp_path / "state") as restored:
        assert len(restored.load().jobs) == 3


# ------------------------------------------------------------ schema versions


def _make_v1(state_dir: Path) -> None:
    with JobStore(state_dir) as store:
        Harness(store=store).submit(spec("old", request_id="req-old"))
        store._db.execute("DROP TABLE lineage")
        store._db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")


def test_store_opens_a_version_1_file_by_migrating_it(tmp_path):
    _make_v1(tmp_path)
    with JobStore(tmp_path) as store:
        assert store.migrated_from == 1
        assert store.job_for_request("req-old") == "/alice/old"
        store.record_lineage("restored", {"checkpoint": "x"}, 1.0)
        assert store.lineage() == [{"at": 1.0, "what": "restored", "checkpoint": "x"}]
    db = sqlite3.connect(tmp_path / DB_NAME)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == \
        str(SCHEMA_VERSION)
    db.close()


def test_restore_of_a_version_1_checkpoint_migrates_it(tmp_path, bucket):
    _make_v1(tmp_path / "source")
    _take(tmp_path / "source", bucket)
    assert bucket.list()[-1]["schema_version"] == 1
    prepare(tmp_path / "new", bucket, "latest", SYSTEM_CLOCK.wall())
    with JobStore(tmp_path / "new") as store:
        assert store.migrated_from is None  # migrated during the restore, before install
        assert "/alice/old" in store.load().jobs
        assert store.lineage()[-1]["what"] == "restored"


def test_store_newer_file_refused_without_changing_it(tmp_path):
    with JobStore(tmp_path) as store:
        store._db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _digest(tmp_path)
    with pytest.raises(StorageError, match="schema version 99 was written by a newer Iris"):
        JobStore(tmp_path)
    assert _digest(tmp_path) == before


def test_policy_names_in_the_bucket_are_checkpoint_names(tmp_path, bucket):
    _one_checkpoint(tmp_path, bucket)
    assert all(policy.NAME.match(m["name"]) for m in bucket.list())


def test_workspace_bundles_travel_with_checkpoints_once(tmp_path, bucket):
    from iris.controller.bundle_store import BundleStore

    store, _ = _store_with_jobs(tmp_path / "old", 1)
    data = b"a packed workspace" * 1000
    digest = hashlib.sha256(data).hexdigest()
    BundleStore(tmp_path / "old" / "bundles").put(digest, data)
    _take(tmp_path / "old", bucket)
    _take(tmp_path / "old", bucket)  # the same bundle again: one object still
    store.close()
    assert bucket.bundle_digests() == {digest}
    assert all(policy.NAME.match(m["name"]) for m in bucket.list())  # bundles are not listed
    prepare(tmp_path / "new", bucket, None, SYSTEM_CLOCK.wall())
    assert BundleStore(tmp_path / "new" / "bundles").get(digest) == data


def test_gcs_outage_fails_the_checkpoint_clearly_and_the_next_one_succeeds(tmp_path):
    server = FakeGcs(tmp_path / "gcs-root")
    server.start()
    try:
        name = server.new_bucket()
        # 2 s of client retries, not the production 120 s: the test waits for the failure.
        bucket = CheckpointBucket(name, "iris/state", client=server.client(), retry_s=2.0)
        store, _ = _store_with_jobs(tmp_path / "s", 2)
        runner = Checkpointer(tmp_path / "s", bucket, PolicyConfig(), SYSTEM_CLOCK,
                              lambda r, t: None)
        server.stop()
        failed = runner.take("test")
        assert failed["error"].startswith("checkpoint ") and "failed" in failed["error"]
        assert runner.last_error == failed["error"]
        assert not list((tmp_path / "s" / "checkpoint-scratch").glob("*"))  # cleaned up
        server.start()
        ok = runner.take("test")
        store.close()
        assert "error" not in ok and runner.last_error is None
        assert [m["name"] for m in bucket.list()] == [ok["name"]]
    finally:
        server.stop()


def test_checkpoint_carries_which_credential_owns_which_worker_and_the_bars(tmp_path, bucket):
    """On a new machine, a stranger with the cluster token cannot take a live worker's id
    either, and a barred id stays barred."""
    from iris.base.errors import ConflictError, PermissionDeniedError
    from iris.controller.credentials import Credentials

    store, _ = _store_with_jobs(tmp_path / "old", 1)
    old = Credentials(tmp_path / "old", lambda *a: None, lambda t: None)
    live = old.issue("w-live", 0.0, None)
    old.issue("w-bad", 0.0, None)
    old.ban("w-bad")
    _take(tmp_path / "old", bucket)
    store.close()
    old.close()
    prepare(tmp_path / "new", bucket, "latest", SYSTEM_CLOCK.wall())
    new = Credentials(tmp_path / "new", lambda *a: None, lambda t: None, now=100.0)
    with pytest.raises(ConflictError, match="restarted"):
        new.issue("w-live", 200.0, None)
    with pytest.raises(PermissionDeniedError, match="revoked by an operator"):
        new.issue("w-bad", 200.0, None)
    assert new.issue("w-live", 200.0, None, proof=live["credential"])["worker_id"] == "w-live"
    assert (tmp_path / "new" / "worker_credentials").stat().st_mode & 0o777 == 0o600
