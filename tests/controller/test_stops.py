"""The stops kernel: an attempt told to stop holds its worker's resources until it is gone."""

from __future__ import annotations

import pytest

from iris.base.resources import Resources
from iris.controller import stops

CPU2 = Resources(cpu=2)


def test_stop_sent_holds_the_resources_until_stopped_which_frees_them():
    state = stops.StopState()
    assert stops.handle(state, stops.StopSent("w1", "a1", 10.0, CPU2), now=5.0) == []
    assert state.by_worker == {"w1": {"a1": CPU2}} and state.sent == {"a1": (5.0, 10.0)}
    assert stops.handle(state, stops.Stopped("a1"), now=6.0) == [stops.Freed("w1")]
    assert state.by_worker == {} and state.sent == {}


def test_stop_sent_again_keeps_the_hold_and_restarts_the_grace():
    state = stops.StopState()
    stops.handle(state, stops.StopSent("w1", "a1", 10.0, CPU2), now=5.0)
    stops.handle(state, stops.StopSent("w1", "a1", 10.0), now=20.0)
    assert state.by_worker == {"w1": {"a1": CPU2}} and state.sent == {"a1": (20.0, 10.0)}


def test_an_unknown_attempt_stopping_frees_nothing():
    state = stops.StopState()
    stops.handle(state, stops.StopSent("w1", "a1", 10.0), now=1.0)  # no hold (unknown)
    assert stops.handle(state, stops.Stopped("a1"), now=2.0) == []
    assert state.sent == {}


def test_a_gone_worker_takes_its_stops_with_it_and_leaves_the_others():
    state = stops.StopState()
    stops.handle(state, stops.StopSent("w1", "a1", 10.0, CPU2), now=1.0)
    stops.handle(state, stops.StopSent("w2", "a2", 10.0, CPU2), now=1.0)
    stops.handle(state, stops.WorkerGone("w1"), now=2.0)
    assert state.by_worker == {"w2": {"a2": CPU2}} and set(state.sent) == {"a2"}


def test_stops_refuses_an_event_it_does_not_know():
    with pytest.raises(TypeError, match="stops cannot handle"):
        stops.handle(stops.StopState(), object(), now=0.0)
