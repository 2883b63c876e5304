"""Gangs through real Region actors, and Ray placement groups, for bench/gang.py.

gangs_per_s: three Region actors, each in its own process with 200 v5litepod-16 slices
(4 hosts each); the controller's gangs object (GangTracker) on an actor's turn in this
process runs the two-phase coordinator, its frames carried over ZeroMQ (RegionCarrier):
reserve in all 3 regions at once, commit the best offer, abort the others, and release as
soon as placed. 64 gangs in flight. Figure = gangs placed AND released / wall time.
multislice_gangs_per_s (`slices=2`): the same, each gang 2 whole slices (8 hosts) reserved
in one round in one region.
ray_gangs_per_s: Ray placement groups of 4 bundles ({"CPU": 1} each, PACK), created,
waited ready, and removed, 64 in flight, on a local Ray with 256 logical CPUs (8 bundles,
one group, on 512 CPUs, for ray_multislice_gangs_per_s: Ray has no notion of whole slices).
"""

from __future__ import annotations

import os
import queue
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import iris
from iris.base.clock import SYSTEM_CLOCK
from iris.controller.gangs.tracking import GangTracker, Phase
from iris.controller.regions.region import RegionCarrier
from iris.controller.scheduling.gang_placement import GangRequest
from iris.controller.scheduling.model import Band, GangShape

# Regions in their own processes grant this token; the placer presents it (roles).
TOKEN = secrets.token_bytes(32)
ROOT = Path(__file__).resolve().parents[1]
REGIONS = ("us-east", "us-central", "eu-west")
_REGION_PROC = """
import os, sys, threading
import iris
from iris.actors.keys import region_key
from iris.controller.regions.region import Region
from iris.controller.gangs.ledger import SliceSpec
region = sys.argv[1]
ctx = iris.connect()
specs = [SliceSpec(f"{region}-s{i}", "v5litepod-16", tuple(f"{region}-s{i}-h{j}" for j in range(4)))
         for i in range(200)]
ctx.node.grant(bytes.fromhex(os.environ['REGION_TOKEN']), 'controller')  # the placer's
ctx.node.host(region_key(region), Region, (region, specs))
print("READY", ctx.node.address, flush=True)
sys.stdin.read()
"""


def bench_gangs_actors(n_gangs: int, in_flight: int = 64, slices: int = 1) -> dict:
    with iris.local_cluster() as cluster:
        procs, addresses = [], {}
        try:
            for region in REGIONS:
                proc = subprocess.Popen(
                    [sys.executable, "-c", textwrap.dedent(_REGION_PROC), region],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                    env={**os.environ, "PYTHONPATH": str(ROOT), "IRIS_ADDRESS": cluster.address,
                         "REGION_TOKEN": TOKEN.hex()})
                procs.append(proc)
                addresses[region] = proc.stdout.readline().split()[1]
            return _run(cluster, addresses, n_gangs, in_flight, slices)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait(30)


OWNER_KEY = "/bench/gangs"


@iris.actor
class GangOwner:
    """The gangs object's owner, as the Controller actor and its service are in production:
    region replies come back through this actor's mailbox as events of the gangs object; a
    turn with nothing queued behind it, and its tick, send the frames (one call per region);
    its tick fires the coordinator's timers. A placed gang is released on the next turn;
    released gangs land in `released`."""

    tick_interval_s = 0.05

    def __init__(self, node, regions: dict):
        self.released: queue.SimpleQueue = queue.SimpleQueue()
        self.failed: list = []
        self._node = node
        self._gangs = GangTracker()
        self._carrier = RegionCarrier(node, self.post, self, regions=regions, auth=TOKEN)

    def post(self, fn, *args) -> None:
        self._node.post_to(OWNER_KEY, self._turn, fn, args)

    def place(self, gang_id: str, shape: GangShape, regions: tuple[str, ...]) -> None:
        tasks = tuple(f"{gang_id}-job[{i}]" for i in range(shape.hosts))
        self._gangs.request(GangRequest(gang_id, f"{gang_id}-job", Band.BATCH, tasks, shape,
                                        regions))

    def gang_replies(self, region: str, replies) -> None:
        self._gangs.replied(region, replies, self._node.clock.monotonic())

    def gang_region_down(self, region: str, why) -> None:
        self._gangs.region_down(region, why, self._node.clock.monotonic())

    def _turn(self, fn, args, last: bool | None = None) -> None:
        fn(*args)
        now = self._node.clock.monotonic()
        # The end of the queue, as the Controller: the frames of every turn before go together.
        last = self._node.backlog(OWNER_KEY) == 0 if last is None else last
        for send in self._gangs.take_sends(now, flush=last):
            self._carrier.send(send)
        for rnd in self._gangs.take_outcomes():
            if rnd.phase is Phase.PLACED:
                self.post(self._gangs.release, rnd.key)
            elif rnd.phase is Phase.RELEASED:
                self.released.put(rnd.key)
            else:
                self.failed.append(rnd)

    def on_tick(self) -> None:
        self._turn(self._gangs.fire_due, (self._node.clock.monotonic(),), last=True)


def _run(cluster, addresses: dict, n_gangs: int, in_flight: int, slices: int) -> dict:
    owner = cluster.node.host(OWNER_KEY, GangOwner, (cluster.node, addresses))
    released, failed = owner.instance.released, owner.instance.failed
    shape = GangShape("v5litepod-16", hosts=4 * slices, whole_slices=slices)
    try:
        t0 = SYSTEM_CLOCK.monotonic()
        started = done = 0
        while done < n_gangs:
            while started < n_gangs and started - done < in_flight:
                regions = tuple(REGIONS[(started + k) % 3] for k in range(3))
                owner.instance.post(owner.instance.place, f"g{started}", shape, regions)
                started += 1
            released.get(timeout=60)
            done += 1
        elapsed = SYSTEM_CLOCK.monotonic() - t0
    finally:
        cluster.node.unhost(OWNER_KEY)
    print(f"real Region actors (3 processes, 200 slices each): {n_gangs} gangs of {slices} "
          f"slice(s) placed and released in {elapsed:.2f} s, {in_flight} in flight, "
          f"{len(failed)} unplaceable")
    pre = "multislice_" if slices > 1 else ""
    return {f"{pre}gangs_per_s": round(n_gangs / elapsed, 1)}


def bench_ray_placement_groups(n_groups: int, in_flight: int = 64, slices: int = 1) -> dict:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    # 256 logical CPUs per slice asked: 64 groups in flight always fit (with 256 for groups
    # of 8 bundles, groups past the 32nd waited and the oldest could starve past 60 s).
    ray.init(num_cpus=256 * slices, include_dashboard=False, log_to_driver=False)
    try:
        def one_round(count: int) -> float:
            t0 = SYSTEM_CLOCK.monotonic()
            live: list = []
            for _ in range(count):
                live.append(placement_group([{"CPU": 1}] * 4 * slices, strategy="PACK"))
                if len(live) >= in_flight:
                    ray.get(live[0].ready(), timeout=60)
                    remove_placement_group(live.pop(0))
            for pg in live:
                ray.get(pg.ready(), timeout=60)
                remove_placement_group(pg)
            return SYSTEM_CLOCK.monotonic() - t0

        one_round(min(100, n_groups))  # warm-up
        elapsed = one_round(n_groups)
    finally:
        ray.shutdown()
    print(f"Ray placement groups ({4 * slices} bundles, PACK): {n_groups} created, ready and "
          f"removed in {elapsed:.2f} s, {in_flight} in flight")
    pre = "multislice_" if slices > 1 else ""
    return {f"ray_{pre}gangs_per_s": round(n_groups / elapsed, 1)}


__all__ = ["bench_gangs_actors", "bench_ray_placement_groups"]
