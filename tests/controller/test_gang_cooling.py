"""A gang every region refused waits out its cooling and is then asked for again, even when
nothing else changes in the meantime (a pass runs only after a change: the end of the
cooling is one). A real ControllerService (SQLite in a temp dir) with a FakeClock."""

from __future__ import annotations

from iris.base.clock import FakeClock
from iris.base.resources import Resources
from iris.controller.gangs.protocol import Refused, ReserveRequest
from iris.controller.gangs.tracking import CoordinatorConfig, SendRegion
from iris.controller.service import ControllerConfig, ControllerService

RETRY_AFTER_S = CoordinatorConfig().retry_after_s

ACCEL = "v5litepod-16"


def test_a_refused_gang_is_asked_for_again_when_its_cooling_ends(tmp_path):
    clock = FakeClock()
    svc = _one_slice_service(tmp_path, clock)
    svc.submit({"name": "/alice/gang", "user": "alice", "replicas": 1,
                "resources": Resources(tpu=ACCEL, cpu=1).to_dict(),
                "entrypoint": {"kind": "command", "argv": ["true"]}})
    [(gang, first)] = svc.gangs.reserving.items()
    _refuse_every_attempt(svc, clock, gang)
    assert gang not in svc.gangs.reserving
    assert "refused by every candidate region" in svc.status("/alice/gang")["pending_reason"][
        "message"]
    clock.advance(RETRY_AFTER_S / 2)
    svc.tick()
    assert gang not in svc.gangs.reserving  # still cooling
    clock.advance(RETRY_AFTER_S / 2)
    svc.tick()  # nothing else changed: the end of the cooling alone asks again
    again = svc.gangs.reserving[gang]
    assert again.job_id == "/alice/gang" and again.key != first.key
    svc.close()


def test_a_gang_killed_while_cooling_is_forgotten_when_its_cooling_ends(tmp_path):
    """Before, the cooling of a gang no longer pending stayed for good, and `cooled` asked
    for a placement pass on every tick from then on (and each such gang was kept)."""
    clock = FakeClock()
    svc = _one_slice_service(tmp_path, clock)
    svc.submit({"name": "/alice/gang", "user": "alice", "replicas": 1,
                "resources": Resources(tpu=ACCEL, cpu=1).to_dict(),
                "entrypoint": {"kind": "command", "argv": ["true"]}})
    [gang] = svc.gangs.reserving
    _refuse_every_attempt(svc, clock, gang)
    svc.kill("/alice/gang", "not wanted")
    clock.advance(RETRY_AFTER_S)
    svc.tick()
    assert svc.gangs.cooling == {} and not svc.gangs.cooled(clock.monotonic())
    svc.close()


def _one_slice_service(tmp_path, clock: FakeClock) -> ControllerService:
    svc = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1", clock)
    for h in range(4):
        svc.register_worker(f"s0-h{h}", f"tcp://127.0.0.1:{h + 2}", {
            "region": "us-east", "slice_id": "s0", "accelerator_type": ACCEL,
            "accelerator_count": "4", "cpu": "8", "memory": str(2**36)}, [])
    return svc


def _refuse_every_attempt(svc, clock: FakeClock, gang: str) -> None:
    """The region refuses each reserve the gangs object sends, until it gives the gang up
    (its backoff waited out on the service's tick)."""
    for _ in range(20):
        for send in [e for e in svc.take_effects() if isinstance(e, SendRegion)]:
            svc.gang_replies(send.region, [
                Refused(send.region, r.gang_id, r.attempt, "NO_CAPACITY", "no free slice")
                for r in send.requests if isinstance(r, ReserveRequest)])
        if gang not in svc.gangs.reserving:
            return
        clock.advance(1.0)
        svc.tick()
    raise AssertionError("the gang was never given up")
