"""The checkpoint packing child (checkpoint/pack.py): it packs what unpack accepts, and it
imports the standard library only, not the controller or the actor runtime (issue 33)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iris.actors import tokens
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import StorageError
from iris.controller.checkpoint.archive import MEMBERS, pack_in_child, unpack
from iris.controller.jobs.store import JobStore
from iris.wire.states import DB_NAME
from tests.controller.test_job_support import Harness, spec

ROOT = Path(__file__).resolve().parents[2]


def test_checkpoint_pack_child_packs_the_store_and_tokens_that_unpack_gives_back(tmp_path):
    state = tmp_path / "state"
    store = JobStore(state)
    h = Harness(store=store)
    for i in range(3):
        h.submit(spec(f"job{i}", request_id=f"req-{i}"))
    token = tokens.load_or_create(state / tokens.CLUSTER_TOKEN_FILE)
    manifest = pack_in_child(state / DB_NAME, state, tmp_path / "ck.tar.gz", "ck",
                             SYSTEM_CLOCK.wall())
    store.close()
    assert manifest["name"] == "ck" and manifest["jobs"] == 3
    (tmp_path / "out").mkdir()
    db = unpack(tmp_path / "ck.tar.gz", manifest, tmp_path / "out")
    assert db == tmp_path / "out" / DB_NAME
    assert tokens.read(tmp_path / "out" / tokens.CLUSTER_TOKEN_FILE) == token
    assert {p.name for p in (tmp_path / "out").iterdir()} <= set(MEMBERS)


def test_checkpoint_pack_child_imports_nothing_of_iris_but_its_parents():
    probe = ("import sys, json, iris.controller.checkpoint.pack\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('iris'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) <= {
        "iris", "iris.base", "iris.base.errors", "iris.controller",
        "iris.controller.checkpoint", "iris.controller.checkpoint.pack"}


def _store_with_a_job(state: Path) -> JobStore:
    store = JobStore(state)
    Harness(store=store).submit(spec("job0", request_id="req-0"))
    return store


def test_checkpoint_pack_child_keeps_a_symlinked_token_as_a_file_that_unpack_takes(tmp_path):
    state = tmp_path / "state"
    store = _store_with_a_job(state)
    real = tokens.load_or_create(tmp_path / "elsewhere.token")
    (state / tokens.CLUSTER_TOKEN_FILE).symlink_to(tmp_path / "elsewhere.token")
    try:
        manifest = pack_in_child(state / DB_NAME, state, tmp_path / "ck.tar.gz", "ck",
                                 SYSTEM_CLOCK.wall())
    finally:
        store.close()
    (tmp_path / "out").mkdir()
    unpack(tmp_path / "ck.tar.gz", manifest, tmp_path / "out")  # was refused: a symlink
    assert tokens.read(tmp_path / "out" / tokens.CLUSTER_TOKEN_FILE) == real


def test_checkpoint_pack_child_refuses_a_token_that_is_no_file_naming_it(tmp_path):
    state = tmp_path / "state"
    store = _store_with_a_job(state)
    try:
        (state / tokens.REVOKED_WORKERS_FILE).mkdir()
        with pytest.raises(StorageError, match=f"{tokens.REVOKED_WORKERS_FILE} is not a "
                           "regular file"):
            pack_in_child(state / DB_NAME, state, tmp_path / "a.tar.gz", "a",
                          SYSTEM_CLOCK.wall())
        (state / tokens.REVOKED_WORKERS_FILE).rmdir()
        os.mkfifo(state / tokens.REVOKED_WORKERS_FILE)  # no writer: a plain open would hang
        with pytest.raises(StorageError, match="is not a regular file"):
            pack_in_child(state / DB_NAME, state, tmp_path / "b.tar.gz", "b",
                          SYSTEM_CLOCK.wall())
    finally:
        store.close()


def test_checkpoint_pack_child_killed_is_an_error_never_a_manifest(tmp_path, monkeypatch):
    """The child dies by SIGKILL after writing half its answer and archive: an error."""
    state = tmp_path / "state"
    store = _store_with_a_job(state)
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nprintf '{\"format\": 1, ' ; echo x > \"$5\"; kill -9 $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    try:
        with pytest.raises(StorageError, match="packing checkpoint ck: exit code -9"):
            pack_in_child(state / DB_NAME, state, tmp_path / "ck.tar.gz", "ck",
                          SYSTEM_CLOCK.wall())
    finally:
        store.close()
