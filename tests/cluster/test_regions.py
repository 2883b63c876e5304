"""Gang allocation through real Region actors in three processes: whole or not at all."""

from __future__ import annotations

import os
import queue
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

import iris
from iris.actors.keys import region_key
from iris.controller.gangs.tracking import CoordinatorConfig, GangTracker
from iris.controller.regions.region import RegionCarrier
from iris.controller.scheduling.gang_placement import GangRequest
from iris.controller.scheduling.model import Band, GangShape

# Regions in their own processes grant this token; the placer presents it (roles).
TOKEN = secrets.token_bytes(32)
ROOT = Path(__file__).resolve().parents[2]
REGION = """
import os, sys, threading
import iris
from iris.actors.keys import region_key
from iris.controller.regions.region import Region
from iris.controller.gangs.ledger import SliceSpec

region, slices = sys.argv[1], int(sys.argv[2])
ctx = iris.connect()
specs = [SliceSpec(f"{region}-s{i}", "v5litepod-16", tuple(f"{region}-s{i}-h{j}" for j in range(4)))
         for i in range(slices)]
ctx.node.grant(bytes.fromhex(os.environ['REGION_TOKEN']), 'controller')  # the placer's
ctx.node.host(region_key(region), Region, (region, specs))
print("READY", ctx.node.address, flush=True)
threading.Event().wait()
"""
SHAPE = GangShape("v5litepod-16", hosts=4, whole_slices=1)
OWNER_KEY = "/test/gangs"



class Outcome(NamedTuple):
    kind: str  # the round's Phase name when taken: PLACED, GIVEN_UP, RELEASED
    region: str
    hosts: tuple[str, ...]
    reasons: dict[str, str]


@iris.actor
class GangOwner:
    """The gangs object's owner here, as the Controller actor and its service are in
    production: the gangs object lives on this actor's turn, a RegionCarrier carries its
    frames to the Region actors, their replies come back through this mailbox as events of
    the gangs object, and the frames go out at the end of each turn; the tick fires the
    coordinator's timers. Outcomes (round key) land in `outcomes` (thread-safe)."""

    tick_interval_s = 0.05

    def __init__(self, node, regions: dict, config: CoordinatorConfig | None = None):
        self.outcomes: queue.Queue = queue.Queue()
        self._clock = node.clock
        self.gangs = GangTracker(config=config)
        self._carrier = RegionCarrier(node, lambda fn, *a: node.post_to(OWNER_KEY, self._turn,
                                                                       fn, a),
                                      self, regions=regions, auth=TOKEN)

    def place(self, gang_id: str, shape: GangShape, regions: tuple[str, ...]) -> None:
        tasks = tuple(f"{gang_id}-job[{i}]" for i in range(shape.hosts))
        self._turn(self.gangs.request, (GangRequest(gang_id, f"{gang_id}-job", Band.BATCH,
                                                    tasks, shape, regions),))

    def release(self, gang_id: str) -> None:
        self._turn(self.gangs.release, (self.gangs.reserving[gang_id].key,))

    def gang_replies(self, region: str, replies) -> None:
        self.gangs.replied(region, replies, self._clock.monotonic())

    def gang_region_down(self, region: str, why) -> None:
        self.gangs.region_down(region, why, self._clock.monotonic())

    def _turn(self, fn, args) -> None:
        fn(*args)
        for send in self.gangs.take_sends(self._clock.monotonic()):
            self._carrier.send(send)
        for rnd in self.gangs.take_outcomes():  # as each round was when taken
            self.outcomes.put(Outcome(rnd.phase.name, rnd.chosen.region if rnd.chosen else "",
                                      rnd.hosts, dict(rnd.reasons)))

    def on_tick(self) -> None:
        self._turn(self.gangs.fire_due, (self._clock.monotonic(),))


def _owner(cluster, regions: dict, config: CoordinatorConfig | None = None):
    return cluster.node.host(OWNER_KEY, GangOwner, (cluster.node, regions, config))


@pytest.fixture
def three_regions(cluster):
    procs, addresses = [], {}
    try:
        for name, slices in (("us-east", 0), ("us-central", 1), ("eu-west", 2)):
            proc = subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(REGION), name, str(slices)],
                stdout=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT), "IRIS_ADDRESS": cluster.address,
                         "REGION_TOKEN": TOKEN.hex()})
            procs.append(proc)
            line = proc.stdout.readline()
            assert line.startswith("READY"), line
            addresses[name] = line.split()[1]
        yield addresses
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(30)


def test_gang_lands_whole_in_one_region_and_release_frees_it(cluster, three_regions):
    owner = _owner(cluster, three_regions)
    events, placer = owner.instance.outcomes, owner.instance
    try:
        regions = ("us-east", "us-central", "eu-west")
        owner.post(placer.place, "g1", SHAPE, regions)
        placed = events.get(timeout=60)
        assert placed.kind == "PLACED" and placed.region in ("us-central", "eu-west")
        assert len(placed.hosts) == 4 and len({h.rsplit("-h", 1)[0] for h in placed.hosts}) == 1
        holds = {name: cluster.node.call(addr, region_key(name), "live_reservations").result(30)
                 for name, addr in three_regions.items()}
        assert holds[placed.region] == 1 and sum(holds.values()) == 1  # losers were aborted
        owner.post(placer.release, "g1")
        assert events.get(timeout=60).kind == "RELEASED"
        assert cluster.node.call(three_regions[placed.region], region_key(placed.region),
                                 "live_reservations").result(30) == 0
    finally:
        cluster.node.unhost(OWNER_KEY)


def test_more_gangs_than_slices_the_extra_one_is_unplaceable_with_reasons(cluster, three_regions):
    config = CoordinatorConfig(max_attempts=2, backoff_initial_s=0.05, backoff_max_s=0.1)
    owner = _owner(cluster, three_regions, config)
    events, placer = owner.instance.outcomes, owner.instance
    try:
        regions = ("us-east", "us-central", "eu-west")
        for i in range(4):  # 3 slices in all: the fourth gang cannot be placed
            owner.post(placer.place, f"g{i}", SHAPE, regions)
        outcomes = [events.get(timeout=60) for _ in range(4)]
        kinds = sorted(o.kind for o in outcomes)
        assert kinds == ["GIVEN_UP", "PLACED", "PLACED", "PLACED"]
        refused = next(o for o in outcomes if o.kind == "GIVEN_UP")
        assert set(refused.reasons) == set(regions)
        hosts = [h for o in outcomes if o.kind == "PLACED" for h in o.hosts]
        assert len(hosts) == len(set(hosts)) == 12  # no host promised twice
    finally:
        cluster.node.unhost(OWNER_KEY)
