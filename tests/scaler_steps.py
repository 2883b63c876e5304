"""Driving a SliceManager to a settled state in tests (its provider calls run on threads)."""

from __future__ import annotations

from collections.abc import Callable

from iris.base.clock import FakeClock
from iris.controller.regions.autoscaler import Create, Delete
from iris.controller.regions.scaler import SliceManager


def settle(mgr: SliceManager, clock: FakeClock, demand: Callable[[], tuple], dt: float = 0.0,
           ) -> list[Create | Delete]:
    """Advance `dt`, then tick with `demand()` (usage, unmet) until the provider's view is
    folded in and nothing is in flight; every decision made on the way."""
    clock.advance(dt)
    out: list[Create | Delete] = []
    for _ in range(20):
        out += mgr.tick(*demand())
        assert mgr.settle(60), "provider calls did not finish in 60 s"
        flight = mgr.status()["in_flight"]
        if not (flight["creates"] or flight["deletes"] or flight["listing"]):
            out += mgr.tick(*demand())
            flight = mgr.status()["in_flight"]
            if not (flight["creates"] or flight["deletes"]):
                return out
    raise AssertionError(f"manager never settled: {mgr.status()['in_flight']}")
