"""classify_exit: the exit status a user sees for each way an attempt can end."""

from __future__ import annotations

import pytest

from iris.worker.outcome import OutcomeKind, classify_exit


@pytest.mark.parametrize("returncode, kind, code, sig", [
    (0, OutcomeKind.SUCCEEDED, 0, None),
    (1, OutcomeKind.FAILED, 1, None),
    (-9, OutcomeKind.KILLED_BY_SIGNAL, 137, 9),
    (137, OutcomeKind.KILLED_BY_SIGNAL, 137, 9),
    (-11, OutcomeKind.KILLED_BY_SIGNAL, 139, 11),
    (255, OutcomeKind.FAILED, 255, None),
])
def test_outcome_exit_status_mapped(returncode, kind, code, sig):
    outcome = classify_exit(returncode)
    assert (outcome.kind, outcome.exit_code, outcome.signal) == (kind, code, sig)


def test_outcome_sigkill_with_oom_counter_is_oom_killed():
    outcome = classify_exit(-9, oom_kills=1, memory_limit_bytes=64 << 20)
    assert outcome.kind is OutcomeKind.OOM_KILLED
    assert str(64 << 20) in outcome.detail


def test_outcome_oom_wins_over_stop_request():
    outcome = classify_exit(137, stop_requested=True, oom_kills=2, memory_limit_bytes=1)
    assert outcome.kind is OutcomeKind.OOM_KILLED


def test_outcome_stop_requested_is_stopped_even_if_exit_zero():
    assert classify_exit(0, stop_requested=True).kind is OutcomeKind.STOPPED
    assert classify_exit(-15, stop_requested=True).signal == 15
