"""No death spiral: a controller that could not listen does not blame its workers for the
silence. A real ControllerService with a FakeClock and 200 registered workers."""

from __future__ import annotations

from iris.base.clock import FakeClock
from iris.controller.service import ControllerConfig, ControllerService
from iris.wire.fencing import SILENT_LOST_S

ATTRS = {"cpu": "4", "memory": str(2**33)}


def _ticks(service: ControllerService, clock: FakeClock, seconds: float) -> None:
    for _ in range(int(seconds / 0.05)):  # the controller's 50 ms ticks, all on time
        clock.advance(0.05)
        service.tick()


def test_a_stalled_controller_declares_no_worker_lost(tmp_path):
    clock = FakeClock()
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1", clock)
    for i in range(200):
        service.register_worker(f"w{i}", f"tcp://127.0.0.1:{2000 + i}", ATTRS, [])
    service.tick()
    clock.advance(SILENT_LOST_S * 2)  # the controller's own loop was stuck (overload, GC)
    service.tick()
    assert len(service.list_workers()) == 200  # their silence was ours
    for i in range(200):  # the reports queued meanwhile arrive
        service.report(f"w{i}", [])
    _ticks(service, clock, SILENT_LOST_S / 2)
    assert len(service.list_workers()) == 200


def test_a_stall_before_the_controllers_first_tick_is_its_own_too(tmp_path):
    """Workers registered, then the controller's loop stood still before it ever ticked (a
    controller started on a starved host): that silence was the controller's as well."""
    clock = FakeClock()
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1", clock)
    for i in range(3):
        service.register_worker(f"w{i}", f"tcp://127.0.0.1:{2000 + i}", ATTRS, [])
    clock.advance(SILENT_LOST_S * 2)  # stuck before the first tick
    service.tick()
    assert len(service.list_workers()) == 3


def test_a_silent_worker_is_still_lost_when_the_controller_listened(tmp_path):
    clock = FakeClock()
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1", clock)
    service.register_worker("quiet", "tcp://127.0.0.1:2", ATTRS, [])
    service.register_worker("chatty", "tcp://127.0.0.1:3", ATTRS, [])
    for _ in range(int(SILENT_LOST_S) + 2):
        _ticks(service, clock, 1.0)
        service.report("chatty", [])
    assert [w["worker_id"] for w in service.list_workers()] == ["chatty"]


def test_a_registration_storm_is_admitted_at_a_bounded_rate_with_back_off(tmp_path):
    import pytest

    from iris.base.errors import OverloadedError
    from iris.controller.service import REGISTRATIONS_PER_S

    clock = FakeClock()
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1", clock)
    waits = []
    for i in range(REGISTRATIONS_PER_S + 100):  # all at one instant
        try:
            service.register_worker(f"w{i}", f"tcp://127.0.0.1:{2000 + i}", ATTRS, [])
        except OverloadedError as exc:
            waits.append(exc.retry_after_s)
    assert len(waits) == 100 and all(w > 0 for w in waits)
    assert len(service.list_workers()) == REGISTRATIONS_PER_S  # a refusal changed nothing
    clock.advance(1.0)
    service.register_worker("late", "tcp://127.0.0.1:9", ATTRS, [])  # admitted again
    with pytest.raises(OverloadedError):
        for i in range(REGISTRATIONS_PER_S + 1):
            service.register_worker(f"x{i}", f"tcp://127.0.0.1:{4000 + i}", ATTRS, [])
