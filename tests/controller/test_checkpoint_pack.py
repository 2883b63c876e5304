"""The checkpoint packing child (checkpoint/pack.py): it packs what unpack accepts, and it
imports the standard library only, not the controller or the actor runtime (issue 33)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from iris.actors import tokens
from iris.base.clock import SYSTEM_CLOCK
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
