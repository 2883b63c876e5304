"""The checkpoint policy as a pure function: when one is due, what it is called, what is pruned."""

from __future__ import annotations

import pytest

from iris.controller.checkpoint import policy
from iris.controller.checkpoint.policy import PolicyConfig, PolicyState, decide

CFG = PolicyConfig(interval_s=300, after_changes=100, min_gap_s=5, retry_s=10, keep=3,
                   keep_days=2)


def _taken(seq: int, at: float) -> PolicyState:
    return policy.finished(policy.started(PolicyState()), seq, at, at + 1)


def test_policy_first_checkpoint_is_due_at_once():
    assert decide(PolicyState(), CFG, seq=0, now=0) == "interval"


def test_policy_nothing_changed_takes_nothing_even_after_the_interval():
    assert decide(_taken(7, at=0), CFG, seq=7, now=10_000) is None


def test_policy_interval_elapsed_with_a_change_is_due():
    state = _taken(7, at=0)
    assert decide(state, CFG, seq=8, now=299) is None
    assert decide(state, CFG, seq=8, now=300) == "interval"


def test_policy_burst_is_due_after_min_gap_not_before():
    state = _taken(7, at=0)
    assert decide(state, CFG, seq=107, now=4.9) is None
    assert decide(state, CFG, seq=106, now=50) is None  # 99 changes: not a burst yet
    assert decide(state, CFG, seq=107, now=5) == "burst"


def test_policy_request_wins_over_gaps_but_not_over_one_in_flight():
    state = PolicyState(taken_seq=7, taken_at=0, requested=True)
    assert decide(state, CFG, seq=7, now=0.1) == "requested"
    flying = policy.started(state)
    assert not flying.requested
    assert decide(flying, CFG, seq=10_000, now=1e6) is None


def test_policy_failure_backs_off_then_retries():
    failed = policy.finished(policy.started(_taken(7, at=0)), None, 400, 401)
    assert failed.taken_seq == 7 and failed.failed_at == 401
    assert decide(failed, CFG, seq=9, now=405) is None
    assert decide(failed, CFG, seq=9, now=411) == "interval"


def test_policy_success_records_the_start_time_and_seq():
    state = policy.finished(policy.started(PolicyState()), 42, 100.0, 103.0)
    assert (state.taken_seq, state.taken_at, state.failed_at, state.in_flight) == \
        (42, 100.0, None, False)


def test_policy_names_sort_as_time_and_round_trip():
    a, b = policy.name_for(1_764_061_455.123), policy.name_for(1_764_061_455.124)
    assert a == "20251125T090415.123Z" and a < b
    assert policy.time_of(a) == pytest.approx(1_764_061_455.123, abs=1e-3)


@pytest.mark.parametrize("bad", ["", "latest", "20251125T090415Z", "../x", "2025112T090415.123Z"])
def test_policy_time_of_refuses_what_is_not_a_name(bad):
    with pytest.raises(ValueError, match="not a checkpoint name"):
        policy.time_of(bad)


def test_policy_prune_keeps_newest_n_and_one_per_recent_day():
    names = ["20261120T100000.000Z", "20261120T230000.000Z",  # day 20: older than 2 days
             "20261123T080000.000Z", "20261123T090000.000Z",  # day 23: its newest is kept
             "20261124T010000.000Z", "20261124T020000.000Z", "20261124T030000.000Z",
             "20261124T040000.000Z", "not-ours"]
    dropped = policy.to_prune(names, CFG)
    assert dropped == ["20261120T100000.000Z", "20261120T230000.000Z",
                       "20261123T080000.000Z", "20261124T010000.000Z"]
    assert "not-ours" not in dropped


def test_policy_prune_never_drops_the_only_or_newest():
    assert policy.to_prune(["20261124T010000.000Z"], PolicyConfig(keep=1, keep_days=0)) == []


@pytest.mark.parametrize("bad", [dict(interval_s=0), dict(after_changes=0), dict(keep=0),
                                 dict(keep_days=-1), dict(min_gap_s=-1)])
def test_policy_config_refuses_nonsense(bad):
    with pytest.raises(ValueError):
        PolicyConfig(**bad)
