"""The service feeds each region's kept inventory from the requests that change it: after a
random day of registrations, jobs starting and ending, kills (stops held until the worker
says, turns later, that the attempt is gone), drains, losses and preemption notices, every push leaves the kept
inventory equal to `region_inventory` from scratch, and a Region fed those pushes holds what
a Region given the whole inventory holds. A real ControllerService (SQLite in a temp dir)
with a FakeClock."""

from __future__ import annotations

import random

import pytest

from iris.base.clock import FakeClock
from iris.controller.gangs import inventory as inv
from iris.controller.gangs.inventory import region_inventory
from iris.controller.preemption_notices import apply_notice
from iris.controller.region_pushes import SyncDelta, SyncRegion
from iris.controller.regions.region import Region
from iris.controller.service import ControllerConfig, ControllerService

HOSTS = [f"s{s}-h{i}" for s in range(3) for i in range(2)] + ["c-1", "c-2"]


@pytest.fixture
def svc(tmp_path):
    service = ControllerService(ControllerConfig(state_dir=tmp_path, stop_grace_s=1.0),
                                "tcp://127.0.0.1:1", FakeClock())
    yield service
    service.close()


def _attrs(host: str, region: str) -> dict:
    attrs = {"cpu": "2", "memory": str(2**33), "region": region}
    if not host.startswith("c-"):
        attrs["slice_id"] = host.split("-")[0]
    return attrs


class Day:
    def __init__(self, svc: ControllerService, seed: int):
        self.svc, self.rng = svc, random.Random(seed)
        self.running: dict[str, str] = {}  # attempt -> worker, as the workers see it
        self.stopping: dict[str, str] = {}  # told to stop, exit not reported yet
        self.regions: dict[str, Region] = {}
        self.jobs: list[str] = []

    def step(self) -> None:
        svc, rng = self.svc, self.rng
        kind = rng.choice(["register", "register", "submit", "submit", "exit", "kill",
                           "stopped", "gone", "drain", "undrain", "notice", "region_gone",
                           "tick"])
        host = rng.choice(HOSTS)
        if kind == "register":
            region = rng.choice(["r1", "r2"])
            mine = sorted(a for a, w in self.running.items() if w == host)
            svc.register_worker(host, f"tcp://127.0.0.1:{HOSTS.index(host) + 2}",
                                _attrs(host, region), mine)
        elif kind == "submit":
            job = svc.submit({"name": f"/alice/j{len(self.jobs)}", "user": "alice",
                              "resources": {"cpu": 1},
                              "entrypoint": {"kind": "command", "argv": ["true"]}})
            self.jobs.append(job["job_id"])
        elif kind == "exit" and self.running:
            attempt = rng.choice(sorted(self.running))
            worker = self.running.pop(attempt)
            if worker in svc.workers.workers:
                svc.report(worker, [{"attempt_id": attempt, "status": "exited",
                                     "exit_code": rng.choice([0, 1])}])
        elif kind == "stopped" and self.stopping:  # a stop ends, turns after it began
            attempt = rng.choice(sorted(self.stopping))
            worker = self.stopping.pop(attempt)
            if worker in svc.workers.workers:
                svc.report(worker, [{"attempt_id": attempt, "status": "exited",
                                     "exit_code": -15}])
        elif kind == "kill" and self.jobs:
            svc.kill(rng.choice(self.jobs))
        elif kind == "gone" and host in svc.workers.workers:
            self._forget(host)
            svc.worker_gone(host, svc.workers.workers[host].address, "goodbye")
        elif kind == "drain" and host in svc.workers.workers:
            svc.drain_hosts({host: host.split("-")[0]})
        elif kind == "undrain":
            svc.undrain_hosts([host])
        elif kind == "notice" and host in svc.workers.workers:
            apply_notice(svc, host, svc.workers.workers[host].address, "maintenance", 5.0)
        elif kind == "region_gone":
            self._forget(host)
            svc.hosts_gone({host: "slice deleted"})
        else:
            svc.clock.advance(0.3)
            svc.tick()
        self._commands()

    def _forget(self, host: str) -> None:
        for table in (self.running, self.stopping):
            for attempt in [a for a, w in table.items() if w == host]:
                del table[attempt]

    def _commands(self) -> None:
        for command in self.svc.take_commands():
            if command.kind == "start":
                self.running[command.body["attempt_id"]] = command.worker_id
            elif self.running.pop(command.body["attempt_id"], None) is not None:
                self.stopping[command.body["attempt_id"]] = command.worker_id

    def push_and_check(self) -> None:
        svc = self.svc
        svc.sync_regions(force=True)
        for msg in svc.pushes.take_outbox():
            if isinstance(msg, SyncRegion):
                self.regions[msg.region] = Region(msg.region, [], svc.clock)
                self.regions[msg.region].sync(msg.slices, msg.busy, msg.unmet,
                                              list(msg.drained), msg.incarnation, msg.seq)
            elif isinstance(msg, SyncDelta):
                self.regions[msg.region].sync_delta({
                    "incarnation": msg.incarnation, "seq": msg.seq, "slices": msg.slices,
                    "removed": msg.removed, "busy": msg.busy, "free": msg.free,
                    "unmet": msg.unmet, "drained": msg.drained, "undrained": msg.undrained})
        reference = region_inventory(svc.state, svc.workers.workers.values(), svc.stopping)
        for region, actor in self.regions.items():
            slices, busy, drained = inv.whole(svc.pushes.inventory, region)
            assert (slices, busy) == reference.get(region, ([], [])), region
            assert drained == sorted(
                h for h in svc.draining if h in svc.workers.workers
                and svc.workers.workers[h].region == region and h not in busy), region
            whole = Region(region, [], svc.clock)
            whole.sync(slices, busy, {}, drained)
            got, want = actor.inventory(), whole.inventory()
            assert {k: got[k] for k in ("slices", "busy", "drained", "free_hosts")} == \
                {k: want[k] for k in ("slices", "busy", "drained", "free_hosts")}, region


@pytest.mark.parametrize("seed", range(6))
def test_service_keeps_each_region_inventory_as_region_inventory_computes_it(svc, seed):
    day = Day(svc, seed)
    for i in range(150):
        day.step()
        if i % 3 == 2:
            day.push_and_check()
    day.push_and_check()
    assert svc.pushes.inventory.hosts  # the day did register hosts
