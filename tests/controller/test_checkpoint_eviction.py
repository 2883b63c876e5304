"""A job's checkpoint interval, from submission to the eviction it steers: a real
ControllerService (SQLite in a temp dir, FakeClock), two batch jobs running, production
work arriving; the attempt that loses the least since its last checkpoint is the one
stopped."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import InvalidRequestError
from iris.controller.service import ControllerConfig, ControllerService


def _job(name: str, priority: str, every: float | None = None) -> dict:
    raw = {"name": f"/u/{name}", "user": "u", "resources": {"cpu": 4}, "priority": priority,
           "entrypoint": {"kind": "command", "argv": ["train"]}}
    if every is not None:
        raw["checkpoint_every_s"] = every
    return raw


def _run(svc: ControllerService, job: str) -> str:
    """Start the job's one attempt on its worker; its attempt id."""
    [attempt] = [a for a in svc.state.attempts.values() if a.job_id == f"/u/{job}"]
    svc.report(attempt.worker_id, [{"attempt_id": attempt.attempt_id, "status": "running"}],
               running=sorted(svc.state.by_worker.get(attempt.worker_id, ())))
    return attempt.attempt_id


@pytest.fixture
def svc(tmp_path):
    clock = FakeClock()
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1",
                                clock)
    for i in range(2):
        service.register_worker(f"w{i}", f"tcp://127.0.0.1:{2000 + i}",
                                {"cpu": "4", "memory": str(2**33)}, [])
    yield service, clock
    service.close()


def test_eviction_stops_the_attempt_with_the_least_work_since_its_checkpoint(svc):
    service, clock = svc
    service.submit(_job("long", "batch", every=1_000))
    service.take_commands()
    long_run = _run(service, "long")
    clock.advance(8_500)
    service.submit(_job("young", "batch", every=3_600))
    service.take_commands()
    young = _run(service, "young")
    clock.advance(1_510)  # long: 10 s since its 10th checkpoint; young: 1,510 s, none yet
    service.submit(_job("urgent", "production"))
    service.take_commands()
    stopped = {a for a in (long_run, young) if a in service.stopping.get(
        service.state.attempts[a].worker_id, {})}
    assert stopped == {long_run}


def test_checkpoint_interval_is_kept_with_the_job_and_bad_values_are_refused(svc):
    service, _ = svc
    service.submit(_job("a", "batch", every=1_800))
    assert service.state.jobs["/u/a"].spec.checkpoint_every_s == 1_800.0
    with pytest.raises(InvalidRequestError, match="checkpoint_every_s"):
        service.submit(_job("b", "batch", every=-5))
    assert "/u/b" not in service.state.jobs
