"""The job store on a real SQLite file: reload equals what was committed, a SIGKILL loses no
acknowledged submit, a restart reconciles workers, and pruning keeps the file bounded."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from iris.base.errors import ConfigError, NotFoundError, StorageError
from iris.controller.jobs import events as ev
from iris.controller.jobs.model import JobState, TaskState
from iris.controller.jobs.store import JobStore, StoreConfig
from tests.controller.test_job_support import Harness, of, snapshot, spec

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path):
    s = JobStore(tmp_path / "state")
    yield s
    s.close()


def _busy_history(h: Harness) -> None:
    """A bit of everything: retries, results, a gang, sub-jobs, a kill, request ids."""
    parent = spec("p", request_id="req-p", env={"A": "1"}, timeout_s=600,
                  max_retries_failure=1)
    h.submit(parent)
    h.exit(h.run(parent.name, worker="w1"), 1, error="oom")
    h.run(parent.name, worker="w2")
    child = spec("c", parent_spec=parent,
                 entrypoint={"kind": "callable", "payload": b"\x80\x05fn"})
    h.submit(child)
    h.exit(h.run(child.name, worker="w3"), 0, result=b"\x80\x05result")
    gang = h.submit(spec("tpu", resources={"tpu": "v5litepod-16"}, replicas=2))
    h.send(ev.Assign(h.eid(), tuple(ev.Placement(gang, i, f"w{4 + i}", f"g{i}")
                                    for i in range(4))))
    h.submit(spec("waiting", scheduling_timeout_s=900))
    doomed = h.submit(spec("doomed"))
    h.send(ev.Kill(h.eid(), doomed))


def test_store_reload_after_close_equals_committed_state(tmp_path):
    with JobStore(tmp_path) as store:
        h = Harness(store=store)
        _busy_history(h)
        expected = snapshot(h.state)
    with JobStore(tmp_path) as store:
        assert snapshot(store.load()) == expected
        assert store.result("/alice/p/c", 0) == b"\x80\x05result"
        assert store.result("/alice/p", 0) is None
        assert store.results("/alice/p/c") == {0: b"\x80\x05result"}
        assert store.job_for_request("req-p") == "/alice/p"
        with pytest.raises(NotFoundError):
            store.result("/alice/nope", 0)


def test_store_reloaded_state_keeps_deadlines_and_idempotency(tmp_path):
    with JobStore(tmp_path) as store:
        h = Harness(store=store)
        _busy_history(h)
        now = h.now
    with JobStore(tmp_path) as store:
        h = Harness(state=store.load(), store=store, now=now)
        assert h.send(ev.Submit(h.eid(), spec("p", request_id="req-p"))) == [
            ev.Accepted("/alice/p", duplicate=True)]
        h.advance(600)
        h.send(ev.Tick(h.eid()))
        assert "timed out" in h.task("/alice/p").error
        h.advance(300)
        h.send(ev.Tick(h.eid()))
        assert h.job_state("/alice/waiting") is JobState.UNSCHEDULABLE


def test_store_restart_reconcile_keeps_running_kills_unknown_retries_missing(tmp_path):
    with JobStore(tmp_path) as store:
        h = Harness(store=store)
        kept_job, lost_job = h.submit(spec("kept")), h.submit(spec("lost"))
        kept, lost = h.run(kept_job, worker="w1"), h.run(lost_job, worker="w1")
        now = h.now
    with JobStore(tmp_path) as store:
        h = Harness(state=store.load(), store=store, now=now)
        effects = h.send(ev.Reconcile(h.eid(), "w1", (kept, "att-from-before")))
        assert [s.attempt_id for s in of(effects, ev.StopAttempt)] == ["att-from-before"]
        assert not of(effects, ev.StartAttempt)   # the kept attempt is not restarted
        assert h.state.attempts[kept].state is TaskState.RUNNING
        assert h.state.attempts[lost].state is TaskState.WORKER_FAILED
        assert h.task_state(lost_job) is TaskState.PENDING
    with JobStore(tmp_path) as store:   # and the reconcile itself was committed
        assert store.load().attempts[lost].state is TaskState.WORKER_FAILED


_CHILD = textwrap.dedent("""
    import sys
    from iris.controller.jobs import events as ev
    from iris.controller.jobs.kernel import handle
    from iris.controller.jobs.spec import validate_submit
    from iris.controller.jobs.store import JobStore

    store = JobStore(sys.argv[1])
    state = store.load()
    i = 0
    while True:
        spec = validate_submit({"name": f"j{i}", "user": "alice", "request_id": f"r{i}",
                                "entrypoint": {"kind": "callable", "payload": b"x" * 512}})
        state, effects = handle(state, ev.Submit(f"e{i}", spec), 1000.0 + i)
        store.apply([e for e in effects if isinstance(e, ev.Persist)])
        print(spec.name, flush=True)   # the acknowledgement: only after the commit
        i += 1
""")


def test_store_sigkill_after_acked_submits_loses_none(tmp_path):
    wanted = 200
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path)],
                            stdout=subprocess.PIPE, cwd=_REPO, text=True,
                            env={**os.environ, "PYTHONPATH": str(_REPO)})
    acked: list[str] = []
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 60
        while len(acked) < wanted and time.monotonic() < deadline:
            if sel.select(timeout=1.0):
                line = proc.stdout.readline()
                if not line:
                    break
                acked.append(line.strip())
        proc.send_signal(signal.SIGKILL)   # mid-stream: the child is still submitting
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert len(acked) >= wanted, f"child acked only {len(acked)} submits"
    with JobStore(tmp_path) as store:
        state = store.load()
    missing = [name for name in acked if name not in state.jobs]
    assert missing == []
    assert all(state.jobs[n].spec.entrypoint.payload == b"x" * 512 for n in acked)


def test_store_prune_keeps_rows_and_file_bounded(tmp_path):
    sizes = []
    with JobStore(tmp_path) as store:
        h = Harness(store=store)
        live = h.submit(spec("live"))
        for rnd in range(4):
            for i in range(150):
                job = h.submit(spec(f"r{rnd}-{i}", request_id=f"q{rnd}-{i}",
                                    entrypoint={"kind": "callable", "payload": b"p" * 8000}))
                h.exit(h.run(job), 0, result=b"r" * 4000)
            h.advance(7200)
            h.send(ev.Prune(h.eid(), retention_s=3600))
            store.prune(retention_s=3600, now=h.now)
            sizes.append(store.size_bytes())
            counts = store.counts()
            assert counts["jobs"] == 1 and counts["tasks"] == 1
            assert counts["attempts"] == counts["results"] == counts["requests"] == 0
        assert set(h.state.jobs) == {live}
        # ~150 jobs x 12 KB = 1.8 MB is written per round; without pruning the file
        # would reach ~7 MB. With it, later rounds reuse the freed pages.
        assert max(sizes) < 2 * sizes[0], sizes
    with JobStore(tmp_path) as store:
        assert set(store.load().jobs) == {live}


def test_store_prune_keeps_jobs_within_retention(store):
    h = Harness(store=store)
    old = h.submit(spec("old"))
    h.exit(h.run(old), 0)
    h.advance(100)
    recent = h.submit(spec("recent"))
    h.exit(h.run(recent), 0)
    assert store.prune(retention_s=50, now=h.now) == 1
    assert set(store.load().jobs) == {recent}


def test_store_replaced_job_leaves_no_old_rows(store):
    h = Harness(store=store)
    job = h.submit(spec("train", replicas=3))
    for i in range(3):
        h.exit(h.run(job, i), 0, result=b"old")
    h.submit(spec("train", replicas=1))
    counts = store.counts()
    assert (counts["tasks"], counts["attempts"], counts["results"]) == (1, 0, 0)
    assert snapshot(store.load()) == snapshot(h.state)


def test_store_logs_every_committed_event_id(store):
    h = Harness(store=store)
    job = h.submit(spec("train"))
    attempt = h.run(job)
    h.exit(attempt, 0)
    h.exit(attempt, 0)    # stale: changes nothing, so nothing is committed
    assert [(e, k) for e, k, _ in store.event_ids()] == [
        ("ev-0", "Submit"), ("ev-2", "Assign"), ("ev-3", "AttemptRunning"),
        ("ev-4", "AttemptExited")]


def test_store_bad_config_refused(tmp_path):
    with pytest.raises(ConfigError, match="synchronous"):
        JobStore(tmp_path, StoreConfig(synchronous="OFF"))


def test_store_newer_schema_refused(tmp_path):
    with JobStore(tmp_path) as store:
        store._db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StorageError, match="schema version 99"):
        JobStore(tmp_path)
