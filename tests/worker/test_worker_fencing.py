"""AttemptTable: stale attempts are refused and change nothing; attempts never overlap."""

from __future__ import annotations

import pytest

from iris.base.errors import ConflictError, InvalidRequestError, StaleAttemptError
from iris.worker.fencing import AttemptTable


def test_fencing_stale_attempt_claim_refused_table_unchanged():
    table = AttemptTable()
    table.claim("t", 2)
    with pytest.raises(StaleAttemptError, match="attempt 1 is stale"):
        table.claim("t", 1)
    assert table.current("t") == 2
    assert table.may_launch("t", 2)


def test_fencing_stop_of_old_attempt_refused():
    table = AttemptTable()
    table.claim("t", 0)
    table.launched("t", 0)
    table.claim("t", 1)
    with pytest.raises(StaleAttemptError, match="not current"):
        table.check("t", 0)
    table.check("t", 1)


def test_fencing_new_attempt_waits_until_old_one_ended():
    table = AttemptTable()
    table.claim("t", 0)
    table.launched("t", 0)
    assert table.claim("t", 1) == [0]
    assert not table.may_launch("t", 1)
    with pytest.raises(ConflictError):
        table.launched("t", 1)
    table.ended("t", 0)
    assert table.may_launch("t", 1)
    table.launched("t", 1)
    assert table.running() == {"t": [1]}


def test_fencing_duplicate_claim_or_launch_refused():
    table = AttemptTable()
    table.claim("t", 0)
    with pytest.raises(ConflictError, match="already claimed"):
        table.claim("t", 0)
    table.launched("t", 0)
    with pytest.raises(ConflictError, match="cannot launch"):
        table.launched("t", 0)


def test_fencing_unknown_task_message_is_stale():
    with pytest.raises(StaleAttemptError, match="current: none"):
        AttemptTable().check("ghost", 0)


@pytest.mark.parametrize("task_id, attempt", [("", 0), ("t", -1), ("t", True), ("t", "1")])
def test_fencing_bad_arguments_refused_with_field(task_id, attempt):
    table = AttemptTable()
    with pytest.raises(InvalidRequestError):
        table.claim(task_id, attempt)
    assert table.running() == {} and table.current("t") is None


def test_fencing_forget_refused_while_running():
    table = AttemptTable()
    table.claim("t", 0)
    table.launched("t", 0)
    with pytest.raises(ConflictError):
        table.forget("t")
    table.ended("t", 0)
    table.forget("t")
    assert table.current("t") is None
