"""Submits that arrive together are one turn: one transaction for all, each answered on its
own, and one pass, which waits for the end of the shell's queue while more requests wait.
A real ControllerService on a real SQLite file, with a FakeClock."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import ConflictError, InvalidRequestError
from iris.controller.jobs.store import JobStore
from iris.controller.service import ControllerConfig, ControllerService
from iris.controller.turns import MAX_DEFER_S

ATTRS = {"cpu": "8", "memory": str(2**34)}


def _service(tmp_path) -> ControllerService:
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1",
                                FakeClock())
    service.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
    return service


def _sub(name: str, **extra) -> dict:
    return {"name": name, "user": "alice", "resources": {"cpu": 1},
            "entrypoint": {"kind": "command", "argv": ["true"]}, **extra}


def _count_commits(service: ControllerService) -> list:
    """The real store, with each commit noted (how many transactions a turn made)."""
    commits: list = []
    real = service.store.apply

    def apply(persists, *args, **kwargs):
        commits.append(persists)
        return real(persists, *args, **kwargs)

    service.store.apply = apply
    return commits


def test_a_batch_commits_once_and_answers_each_submission_in_order(tmp_path):
    service = _service(tmp_path)
    commits = _count_commits(service)
    answers = service.submits([
        _sub("/alice/a", request_id="r-a"),
        {"name": "/alice/bad", "user": "alice"},             # no entrypoint: its own error
        _sub("/alice/p"),
        _sub("/alice/p/child", parent="/alice/p"),           # follows its parent in one batch
        _sub("/alice/a", request_id="r-a"),                  # the same request again
        _sub("/alice/other", request_id="r-a"),              # the request id of another job
    ])
    assert answers[0] == {"job_id": "/alice/a", "duplicate": False}
    assert isinstance(answers[1], InvalidRequestError)
    assert answers[2] == {"job_id": "/alice/p", "duplicate": False}
    assert answers[3] == {"job_id": "/alice/p/child", "duplicate": False}
    assert answers[4] == {"job_id": "/alice/a", "duplicate": True}
    assert isinstance(answers[5], ConflictError)
    assert len(commits) == 1  # one transaction (one fsync) for the batch and its pass
    assert service.status("/alice/a")["tasks"][0]["attempt_id"]  # placed in that turn
    service.close()
    with JobStore(tmp_path) as store:  # what was answered is on disk
        assert set(store.load().jobs) == {"/alice/a", "/alice/p", "/alice/p/child"}


def test_a_batch_the_store_refuses_is_tried_again_one_by_one(tmp_path):
    service = _service(tmp_path)
    real, refused = service.store.apply, []

    def apply(persists, *args, **kwargs):  # the store refuses the first (batched) commit
        if not refused:
            refused.append(True)
            raise InvalidRequestError("value: refused by the store")
        return real(persists, *args, **kwargs)

    service.store.apply = apply
    answers = service.submits([_sub("/alice/a"), _sub("/alice/b")])
    assert answers == [{"job_id": "/alice/a", "duplicate": False},
                       {"job_id": "/alice/b", "duplicate": False}]
    service.close()
    with JobStore(tmp_path) as store:
        assert set(store.load().jobs) == {"/alice/a", "/alice/b"}


def test_a_lone_submission_the_store_refuses_gets_that_error(tmp_path):
    service = _service(tmp_path)

    def apply(persists, *args, **kwargs):
        raise InvalidRequestError("value: refused by the store")

    service.store.apply = apply
    [bad, answer] = service.submits([{"name": "/alice/bad"}, _sub("/alice/a")])
    assert isinstance(bad, InvalidRequestError) and "refused" not in str(bad)
    assert isinstance(answer, InvalidRequestError) and "refused" in str(answer)
    assert "/alice/a" not in service.state.jobs  # memory went back to what the disk holds


def test_a_pass_asked_for_later_runs_at_the_end_of_the_queue(tmp_path):
    service = _service(tmp_path)
    queued = [True]
    service.later.queued = lambda: queued[0]
    service.submits([_sub("/alice/a")])
    assert service.later.wanted
    assert service.status("/alice/a")["tasks"][0]["attempt_id"] is None  # not placed yet
    queued[0] = False  # the queue ran dry: the shell runs the pass left for it
    service.schedule_now()
    assert not service.later.wanted
    assert service.status("/alice/a")["tasks"][0]["attempt_id"]


def test_a_pass_waits_at_most_a_quarter_second_for_a_queue_that_never_runs_dry(tmp_path):
    service = _service(tmp_path)
    service.later.queued = lambda: True
    service.submits([_sub("/alice/a")])
    service.tick()  # still within MAX_DEFER_S: the tick leaves it for the end of the queue
    assert service.status("/alice/a")["tasks"][0]["attempt_id"] is None
    service.clock.advance(MAX_DEFER_S)
    service.tick()
    assert service.status("/alice/a")["tasks"][0]["attempt_id"]
    assert not service.later.wanted


@pytest.mark.parametrize("n", [1, 30])
def test_places_in_line_are_shown_when_read(tmp_path, n):
    service = _service(tmp_path)  # one 8-cpu worker: the first job runs, the rest wait
    service.submits([_sub(f"/alice/big{i:02}", resources={"cpu": 8}) for i in range(n + 1)])
    reason = service.status("/alice/big01")["pending_reason"]
    assert reason["details"]["queue"]["position"] == 1
    assert reason["message"].startswith("1st in ")
    rows = {r["job_id"]: r for r in service.list_jobs()}
    assert rows[f"/alice/big{n:02}"]["pending_reason"]["details"]["queue"]["position"] == n
    service.kill("/alice/big01")  # the line moves up when read again after the next pass
    service.schedule_now()
    if n > 1:
        assert service.status("/alice/big02")["pending_reason"]["details"]["queue"][
            "position"] == 1
