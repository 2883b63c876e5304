"""One request of the controller, one reading of the clock: everything a turn decides (who
is lost, what is admitted, when a stop was sent, what the kernel stamps) uses one `now`."""

from __future__ import annotations

from iris.base.clock import FakeClock
from iris.controller.service import ControllerConfig, ControllerService

ATTRS = {"cpu": "2", "memory": str(2**33), "region": "r1"}


class CountingClock(FakeClock):
    """A FakeClock that counts how often it is read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def monotonic(self) -> float:
        self.reads += 1
        return super().monotonic()

    def wall(self) -> float:
        self.reads += 1
        return super().wall()


def test_each_request_reads_the_clock_once_however_much_it_decides(tmp_path):
    clock = CountingClock()
    svc = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1", clock)
    try:
        for request in (lambda: svc.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, []),
                        lambda: svc.tick(),
                        lambda: svc.report("w1", [], running=["att-nobody-wants"]),
                        lambda: svc.worker_gone("w1", "tcp://127.0.0.1:2", "stopped")):
            clock.reads = 0
            request()
            assert clock.reads == 2  # one wall, one monotonic reading, at the turn's start
            clock.advance(0.5)
    finally:
        svc.close()


def test_a_later_request_sees_the_clock_move(tmp_path):
    clock = FakeClock()
    svc = ControllerService(ControllerConfig(state_dir=tmp_path, worker_dead_after_s=2.0),
                            "tcp://127.0.0.1:1", clock)
    try:
        svc.register_worker("w1", "tcp://127.0.0.1:2", ATTRS, [])
        for _ in range(6):
            clock.advance(0.5)
            svc.tick()
        assert "w1" not in svc.workers.workers  # silent 3 s > 2 s: lost on a later turn
    finally:
        svc.close()
