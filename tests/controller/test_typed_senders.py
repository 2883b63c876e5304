"""What the controller sends is built as its control.* type and decodes with it (issue 30):
the start and stop commands to workers and the inventory pushes to regions, taken from a
real ControllerService (SQLite in a temp dir, a FakeClock) through a day's small events."""

from __future__ import annotations

import pytest

from iris.base.clock import FakeClock
from iris.controller.region_pushes import SyncDelta, SyncRegion, region_push
from iris.controller.service import ControllerConfig, ControllerService
from iris.wire import control

ATTRS = {"cpu": "4", "memory": str(2**33), "region": "east", "slice_id": "s1"}
SYNC_NAMES = ("slices", "busy", "unmet", "drained", "incarnation", "seq")


@pytest.fixture
def svc(tmp_path):
    clock = FakeClock()
    service = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1",
                                clock)
    service.register_worker("s1-h0", "tcp://127.0.0.1:2", ATTRS, [])
    service.register_worker("s1-h1", "tcp://127.0.0.1:3", ATTRS, [])
    yield service, clock
    service.close()


def _day(svc: ControllerService, clock: FakeClock) -> tuple[list, list]:
    """Submit, kill, drain, lose a worker; every command and region push on the way."""
    commands, pushes = [], []

    def take() -> None:
        for effect in svc.take_effects():
            (pushes if isinstance(effect, SyncRegion | SyncDelta) else commands).append(effect)

    for name in ("a", "b"):
        svc.submit({"name": f"/alice/{name}", "user": "alice", "resources": {"cpu": 1},
                    "pip": ["numpy"], "env": {"X": "1"},
                    "entrypoint": {"kind": "command", "argv": ["true"]}})
    take()
    svc.kill("/alice/a")
    svc.drain_hosts({"s1-h1": "s1"})
    clock.advance(1.0)
    svc.tick()
    take()
    svc.worker_gone("s1-h0", "tcp://127.0.0.1:2", "goodbye")
    clock.advance(1.0)
    svc.tick()
    take()
    return [c for c in commands if hasattr(c, "message")], pushes


def test_commands_to_workers_decode_with_their_schema_type(svc):
    commands, _ = _day(*svc)
    assert {c.method for c in commands} == {"start_attempt", "stop_attempt"}
    for command in commands:
        assert isinstance(command.message, control.Launch | control.StopRequest)
        wire = control.encode(command.message)  # what the actor sends (Controller._command)
        assert control.decode(type(command.message), wire) == command.message
    launch = next(c.message for c in commands if c.method == "start_attempt")
    assert launch.pip == ("numpy",) and launch.entrypoint.argv == ("true",)


def test_region_pushes_decode_with_their_schema_type(svc):
    _, pushes = _day(*svc)
    assert {type(p) for p in pushes} == {SyncRegion, SyncDelta}
    for push in pushes:
        method, args = region_push(push)
        if method == "sync":
            control.arguments(control.RegionSync, SYNC_NAMES, args)
        else:
            assert method == "sync_delta" and len(args) == 1
            control.decode(control.RegionDelta, args[0])


def test_report_answers_decode_with_their_schema_type(svc):
    service, _ = svc
    known = service.report("s1-h0", [])
    unknown = service.report("nobody", [])
    assert control.decode(control.ReportAnswer, known).reregister is False
    assert control.decode(control.ReportAnswer, unknown).reregister is True
    assert control.decode(control.ReportAnswer, known).interval_s is not None
    # A worker from before report fronts refuses an unknown field: without fronts the
    # answer names only the fields it knows.
    for answer in (known, unknown):
        assert "reports_to" not in answer


# The keys clients sent as plain dicts before the Submission type (issue 30): the wire stays.
_OLD_KEYS = {"name", "entrypoint", "replicas", "resources", "env", "pip", "constraints",
             "user", "request_id"}


def _double(x: int) -> int:
    return 2 * x


@pytest.mark.parametrize(("entry", "args", "options"), [
    (["python", "train.py"], (), {"priority": "batch", "timeout": 30.0, "pip": ["numpy"]}),
    (_double, (21,), {"replicas": 2, "env": {"X": "1"}, "existing_capacity_only": True,
                      "constraints": {"region": "east"}, "max_retries_failure": 2}),
])
def test_client_submission_decodes_with_its_schema_type_into_a_jobspec(entry, args, options):
    from iris.client.jobs import build_submission, submission_wire
    from iris.controller.jobs.spec import decode_submission, validate_submit

    sub = build_submission(entry, args, name="job", **options)
    wire = submission_wire(sub)
    assert set(wire) >= _OLD_KEYS and None not in wire.values()
    assert set(wire["entrypoint"]) == ({"kind", "argv"} if isinstance(entry, list)
                                       else {"kind", "payload"})
    assert decode_submission(wire) == sub  # what the controller decodes is what was built
    spec = validate_submit(decode_submission(wire))
    assert spec.entrypoint.kind == ("command" if isinstance(entry, list) else "callable")
    assert spec.replicas == options.get("replicas", 1)
    assert spec.existing_capacity_only is options.get("existing_capacity_only", False)


def test_service_submit_takes_the_typed_submission(svc):
    from iris.client.jobs import build_submission

    service, _ = svc
    sub = build_submission(["true"], (), name="typed", resources=None)
    answer = service.submit(sub)
    assert answer["job_id"].endswith("/typed") and not answer["duplicate"]
