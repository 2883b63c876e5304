"""The fleet view kept between passes equals one built from scratch, whatever happened between.

A real ControllerService (SQLite in a temp dir, FakeClock) driven by random operations:
workers register (new, or again with other attributes), jobs are submitted, attempts run and
exit, jobs are killed, workers leave or go silent, hosts drain. Its scheduling passes use the
incremental FleetView; after every operation the view must equal
`Fleet(host_views(...))` of the same state, field by field.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.base.clock import FakeClock
from iris.controller import scheduler_view
from iris.controller.scheduling.fleet import Fleet
from iris.controller.service import ControllerConfig, ControllerService

_FIELDS = ("hosts", "free_cpu", "free_mem", "free_chips", "slots", "blocked", "idle",
           "assigned", "pools", "slices", "slices_by_type", "gang_members", "_index", "total",
           "_all")


def _fresh(svc: ControllerService) -> Fleet:
    held = svc.gangs.held_hosts() | set(svc.draining)
    return Fleet(scheduler_view.host_views(svc.state, svc.workers.workers.values(),
                                           svc.stopping, held))


def _assert_same(kept: Fleet, fresh: Fleet) -> None:
    for name in _FIELDS:
        assert getattr(kept, name) == getattr(fresh, name), name


def _attrs(data, i: int) -> dict:
    attrs = {"cpu": str(data.draw(st.sampled_from([2, 4, 8]))), "memory": str(2**33),
             "region": "r1"}
    if data.draw(st.booleans()):
        attrs["zone"] = data.draw(st.sampled_from(["a", "b"]))
    if data.draw(st.booleans()):
        attrs["slice_id"] = f"s{i % 3}"
    return attrs


def _job(data, n: int) -> dict:
    user = data.draw(st.sampled_from(["u", "v"]))
    return {"name": f"/{user}/j{n}", "user": user,
            "resources": {"cpu": data.draw(st.sampled_from([1, 2, 3]))},
            "replicas": data.draw(st.integers(1, 3)),
            "entrypoint": {"kind": "command", "argv": ["true"]}}


def _step(data, svc: ControllerService, clock: FakeClock, n: int) -> None:
    workers = sorted(svc.workers.workers)
    op = data.draw(st.sampled_from(["register", "register", "submit", "run", "exit", "kill",
                                    "gone", "tick", "drain"]))
    if op == "register" or not workers:
        i = data.draw(st.integers(0, 7))
        svc.register_worker(f"w{i}", f"tcp://127.0.0.1:{2000 + i}", _attrs(data, i), [])
    elif op == "submit":
        svc.submit(_job(data, n))
    elif op in ("run", "exit"):
        w = data.draw(st.sampled_from(workers))
        # Ordered by task, not by attempt id: ids are random, and hypothesis replays a
        # choice sequence only if the same choices lead to the same draws.
        held = sorted(svc.state.by_worker.get(w, ()), key=lambda a: (
            svc.state.attempts[a].job_id, svc.state.attempts[a].task_index))
        if held:
            a = data.draw(st.sampled_from(held))
            update = {"attempt_id": a, "status": "running"} if op == "run" else \
                {"attempt_id": a, "status": "exited", "exit_code": 0}
            svc.report(w, [update], running=[] if op == "exit" else held)
    elif op == "kill" and svc.state.jobs:
        svc.kill(data.draw(st.sampled_from(sorted(svc.state.jobs))))
    elif op == "gone":
        w = data.draw(st.sampled_from(workers))
        svc.worker_gone(w, svc.workers.workers[w].address, "test")
    elif op == "drain":
        w = data.draw(st.sampled_from(workers))
        svc.drain_hosts({w: "s-drain"})
    else:
        clock.advance(data.draw(st.sampled_from([0.05, 1.0, 40.0])))
        svc.tick()
    svc.take_commands()


# 15 cases in the main suite (each is a controller service run up to 40 steps); the soak tier
# (tests/README.md) searches 60 more.
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fleet_view_kept_between_passes_equals_a_rebuild(data):
    _fleet_view_case(data)


@pytest.mark.soak
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fleet_view_kept_between_passes_soak(data):
    _fleet_view_case(data)


def _fleet_view_case(data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock()
        svc = ControllerService(ControllerConfig(state_dir=Path(tmp), accept_unfit=True),
                                "tcp://127.0.0.1:1", clock)
        try:
            for n in range(data.draw(st.integers(5, 40))):
                _step(data, svc, clock, n)
                held = svc.gangs.held_hosts() | set(svc.draining)
                kept = svc.fleet_view.fleet(svc.state, svc.workers.workers, svc.stopping,
                                            held)
                _assert_same(kept, _fresh(svc))
                _assert_same(kept.for_pass(), _fresh(svc))
        finally:
            svc.close()


def test_fleet_view_rebuilds_only_what_changed(tmp_path):
    clock = FakeClock()
    svc = ControllerService(ControllerConfig(state_dir=tmp_path), "tcp://127.0.0.1:1", clock)
    try:
        for i in range(50):
            svc.register_worker(f"w{i}", f"tcp://127.0.0.1:{2000 + i}",
                                {"cpu": "4", "memory": str(2**33)}, [])
        view = svc.fleet_view
        view.fleet(svc.state, svc.workers.workers, svc.stopping)
        rebuilds, updated = view.rebuilds, view.updated
        svc.submit({"name": "/u/a", "user": "u", "resources": {"cpu": 1},
                    "entrypoint": {"kind": "command", "argv": ["true"]}})
        [start] = svc.take_commands()
        assert view.rebuilds == rebuilds  # one submit: no rebuild of 50 hosts...
        view.fleet(svc.state, svc.workers.workers, svc.stopping)
        assert view.updated == updated + 1  # ...only the row of the host it went to
        svc.register_worker("w50", "tcp://127.0.0.1:3000", {"cpu": "4"}, [])
        fleet = view.fleet(svc.state, svc.workers.workers, svc.stopping)
        assert view.rebuilds == rebuilds and fleet.hosts[-1].host_id == "w50"
        assert start.worker_id in svc.workers.workers
        # A hold set or cleared flips the row's flag: no row is built again.
        updated, flipped = view.updated, view.flipped
        fleet = view.fleet(svc.state, svc.workers.workers, svc.stopping, held={"w7"})
        assert (view.updated, view.flipped) == (updated, flipped + 1)
        assert fleet.hosts[7].held and fleet.blocked[7]
        fleet = view.fleet(svc.state, svc.workers.workers, svc.stopping, held=())
        assert (view.updated, view.flipped) == (updated, flipped + 2)
        assert not fleet.hosts[7].held and not fleet.blocked[7]
        assert view.rebuilds == rebuilds
    finally:
        svc.close()
