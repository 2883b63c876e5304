"""Region inventories kept incrementally (gangs/inventory.py) and pushed as deltas: after any
sequence of events the kept inventory equals `region_inventory` computed from scratch, and a
Region that applied the deltas holds what a Region given the whole inventory holds. Pure:
the kernel state and the stops table are changed the way the kernel and stops.py change them,
the Region actors are real objects called directly (their sockets are tested elsewhere)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.base.clock import FakeClock
from iris.base.errors import ConflictError
from iris.base.resources import Resources
from iris.controller.gangs import inventory as inv
from iris.controller.gangs.inventory import host_facts, region_inventory
from iris.controller.gangs.ledger import ReservationLedger, SliceSpec
from iris.controller.jobs.state import KernelState
from iris.controller.region_pushes import RegionPushes, SyncDelta, SyncRegion
from iris.controller.regions.region import Region
from iris.controller.scheduling.model import GangShape
from iris.controller.workers import WorkerInfo

# Few hosts and two regions, so that random steps often meet on one host or one slice.
HOSTS = [f"s{s}-h{i}" for s in range(2) for i in range(2)] + ["c-1"]
REGIONS = ["r1", "r2"]


class World:
    """The controller's side: workers, the kernel's by_worker, stops, drains; RegionPushes fed
    the touched hosts' facts as the service feeds it; one Region per region fed its pushes."""

    def __init__(self) -> None:
        self.state = KernelState()
        self.workers: dict[str, WorkerInfo] = {}
        self.stopping: dict[str, dict[str, Resources]] = {}
        self.draining: set[str] = set()
        self.pushes = RegionPushes((), 0.0, incarnation="inc-test")
        self.regions = {r: Region(r, [], FakeClock()) for r in REGIONS}
        self.touched: set[str] = set()
        self.sent: list[SyncRegion | SyncDelta] = []
        self.refusals = 0
        self.stale: set[str] = set()  # restarted, and not sent a whole inventory since
        self._n = 0

    def register(self, host: str, region: str, in_slice: bool, team: str) -> None:
        attrs = {"region": region, "team": team, "accelerator_type": "v5litepod-16"}
        if in_slice and not host.startswith("c-"):
            attrs["slice_id"] = host.split("-")[0]
        self.workers[host] = WorkerInfo(host, "tcp://x:1", region, attrs, 8.0, 2**34, 4,
                                        0.0, 0.0)
        self.touched.add(host)

    def lose(self, host: str) -> None:
        self.workers.pop(host, None)
        self.stopping.pop(host, None)
        self.draining.discard(host)
        self.touched.add(host)

    def start(self, host: str) -> None:
        if host in self.workers:
            self._n += 1
            self.state.by_worker.setdefault(host, set()).add(f"att-{self._n}")
            self.touched.add(host)

    def end(self, host: str) -> None:
        held = self.state.by_worker.get(host)
        if held:
            held.pop()
            if not held:
                del self.state.by_worker[host]
            self.touched.add(host)

    def stop_begins(self, host: str) -> None:
        if host in self.workers:
            self._n += 1
            self.stopping.setdefault(host, {})[f"att-{self._n}"] = Resources(cpu=1)
            self.touched.add(host)

    def stop_ends(self, host: str) -> None:
        self.stopping.pop(host, None)
        self.touched.add(host)

    def drain(self, host: str, on: bool) -> None:
        if on and host in self.workers:
            self.draining.add(host)
        else:
            self.draining.discard(host)
        self.touched.add(host)

    def restart_region(self, region: str) -> None:
        self.regions[region] = Region(region, [], FakeClock())
        self.stale.add(region)

    def push(self, keepalive: bool = False) -> None:
        touched, self.touched = sorted(self.touched), set()
        self.pushes.note_hosts(
            inv.HostIs(h, host_facts(self.state, self.workers[h], self.stopping,
                                     self.draining))
            if h in self.workers else inv.HostGone(h) for h in touched)
        self.pushes.push_regions({}, REGIONS, fulls=self.pushes.full_due(REGIONS),
                                  keepalive=keepalive)
        for msg in self.pushes.take_outbox():
            self.sent.append(msg)
            try:
                deliver(self.regions[msg.region], msg)
                if isinstance(msg, SyncRegion):
                    self.stale.discard(msg.region)
            except ConflictError:
                self.refusals += 1
                self.pushes.push_failed(msg.region, msg.seq)

    def reference(self) -> dict:
        return region_inventory(self.state, self.workers.values(), self.stopping)


def deliver(region: Region, msg: SyncRegion | SyncDelta) -> None:
    if isinstance(msg, SyncRegion):
        region.sync(msg.slices, msg.busy, msg.unmet, list(msg.drained), msg.incarnation,
                    msg.seq)
    else:
        region.sync_delta({"incarnation": msg.incarnation, "seq": msg.seq,
                           "slices": msg.slices, "removed": msg.removed, "busy": msg.busy,
                           "free": msg.free, "unmet": msg.unmet, "drained": msg.drained,
                           "undrained": msg.undrained})


def whole_region(world: World, region: str) -> Region:
    """A fresh Region given the reference inventory whole, as `sync` would give it."""
    slices, busy = world.reference().get(region, ([], []))
    fresh = Region(region, [], FakeClock())
    fresh.sync(slices, busy, {}, sorted(_drained(world, region)))
    return fresh


def _drained(world: World, region: str) -> set[str]:
    return {h for h in world.draining if h in world.workers
            and world.workers[h].region == region and not world.state.by_worker.get(h)
            and not world.stopping.get(h)}


def _ledger_view(region: Region) -> dict:
    out = region.inventory()
    return {k: out[k] for k in ("slices", "busy", "drained", "free_hosts")}


STEPS = st.lists(st.tuples(st.one_of(
    st.tuples(st.just("register"), st.sampled_from(HOSTS), st.sampled_from(REGIONS),
              st.booleans(), st.sampled_from(["a", "b"])),
    st.tuples(st.sampled_from(["lose", "start", "end", "stop_begins", "stop_ends",
                               "drain", "undrain"]), st.sampled_from(HOSTS)),
    st.tuples(st.just("restart_region"), st.sampled_from(REGIONS)),
), st.booleans()), min_size=5, max_size=80)  # (step, push after it)
# Where each host first registers (region, in a slice, team): most steps then meet a host
# that is registered, so attempts start and stops begin on it.
FIRST = st.lists(st.tuples(st.sampled_from(REGIONS), st.booleans(), st.sampled_from(["a", "b"])),
                 min_size=len(HOSTS), max_size=len(HOSTS))


def _apply(world: World, step: tuple) -> None:
    kind, *args = step
    if kind == "drain":
        world.drain(args[0], True)
    elif kind == "undrain":
        world.drain(args[0], False)
    else:
        getattr(world, kind)(*args)


# 200 cases in the main suite; the soak tier (tests/README.md) searches 1000 more.
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FIRST, STEPS)
def test_inventory_kept_incrementally_equals_region_inventory_and_deltas_equal_a_full_sync(
        first, steps):
    _inventory_case(first, steps)


@pytest.mark.soak
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FIRST, STEPS)
def test_inventory_kept_incrementally_soak(first, steps):
    _inventory_case(first, steps)


def _inventory_case(first, steps) -> None:
    world = World()
    for host, (region, in_slice, team) in zip(HOSTS, first, strict=True):
        world.register(host, region, in_slice, team)
    for step, push in steps:
        _apply(world, step)
        if push:
            world.push()
            _check(world)
    world.push(keepalive=True)  # a region that restarted with no change since refuses it...
    world.push()  # ...and gets its whole inventory
    _check(world)


def _check(world: World) -> None:
    reference = world.reference()
    for region in REGIONS:
        rows, busy, drained = inv.whole(world.pushes.inventory, region)
        assert (rows, busy) == reference.get(region, ([], []))
        assert set(drained) == _drained(world, region)
        if region in world.stale:
            continue  # restarted: repaired after its next delta is refused
        assert _ledger_view(world.regions[region]) == _ledger_view(whole_region(world, region))


def test_inventory_a_busy_change_is_pushed_as_a_delta_of_that_host_alone():
    world = World()
    for host in HOSTS:
        world.register(host, "r1", True, "a")
    world.push()
    world.start("s1-h1")
    world.touched.add("s0-h0")  # touched but unchanged: nothing to say about it
    world.push()
    [delta] = world.sent[-1:]
    assert isinstance(delta, SyncDelta) and delta.busy == ["s1-h1"]
    assert (delta.slices, delta.removed, delta.free, delta.unmet) == ([], [], [], None)
    world.end("s1-h1")
    world.push()
    assert world.sent[-1].free == ["s1-h1"] and world.sent[-1].seq == delta.seq + 1
    assert world.regions["r1"].inventory()["busy"] == []


def test_inventory_restarted_region_refuses_the_next_delta_and_gets_the_whole_inventory():
    world = World()
    for host in HOSTS[:4]:
        world.register(host, "r1", True, "a")
    world.push()
    world.restart_region("r1")
    world.register("s2-h0", "r1", True, "a")
    world.push()  # the delta is refused: the Region holds no numbered push
    assert world.refusals == 1 and world.regions["r1"].inventory()["slices"] == {}
    world.push()
    got = world.regions["r1"].inventory()
    assert sorted(h for hs in got["slices"].values() for h in hs) == sorted(HOSTS[:4] +
                                                                           ["s2-h0"])


def test_inventory_late_refusal_of_a_push_older_than_the_whole_one_is_ignored():
    world = World()
    world.register("c-1", "r1", False, "a")
    world.push()
    state = world.pushes.inventory
    assert world.pushes.push_failed("r1", 1)  # the whole push itself was lost: again
    world.push()
    assert inv.region(state, "r1").full_seq == 2
    assert not world.pushes.push_failed("r1", 1)  # older than the whole push 2
    assert not inv.region(state, "r1").full_due


def test_ledger_delta_keeps_a_reserved_host_out_of_offers_while_its_slice_is_replaced():
    """A host held for a settling gang is never offered twice, even when its slice leaves
    the inventory and comes back (a worker lost and re-registered) through deltas."""
    spec = SliceSpec("s1", "v5litepod-16", ("s1-h0", "s1-h1"))
    ledger = ReservationLedger("r1", [spec, SliceSpec("s2", "v5litepod-16",
                                                      ("s2-h0", "s2-h1"))])
    shape = GangShape("v5litepod-16", hosts=2, whole_slices=1)
    first = ledger.reserve("g1", 1, shape, 10.0, now=0.0)
    assert first.hosts == ("s1-h0", "s1-h1")
    ledger.apply_delta(removed=["s1"])
    ledger.apply_delta(slices=[spec])
    second = ledger.reserve("g2", 1, shape, 10.0, now=1.0)
    assert second.hosts == ("s2-h0", "s2-h1")
    assert ledger.reserve("g3", 1, shape, 10.0, now=1.0).code == "NO_CAPACITY"


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"removed": ["s9"]}, "removed: no slice 's9'"),
    ({"slices": [SliceSpec("s3", None, ("s1-h0",))]}, "host 's1-h0' of slice 's3' is already"),
    ({"slices": [SliceSpec("s3", None, ("x",)), SliceSpec("s4", None, ("x",))]},
     "host 'x' is in two slices"),
    ({"busy": ["nobody"]}, "busy: host 'nobody' is in no slice"),
    ({"busy": ["s1-h0"], "free": ["s1-h0"]}, "listed both busy and free"),
    ({"removed": ["s1"], "free": ["s1-h0"]}, "free: host 's1-h0' is in no slice"),
])
def test_ledger_malformed_delta_names_the_problem_and_changes_nothing(kwargs, words):
    ledger = ReservationLedger("r1", [SliceSpec("s1", None, ("s1-h0", "s1-h1"))])
    ledger.set_busy(["s1-h1"], True)
    before = ledger.inventory()
    with pytest.raises(ValueError, match=words):
        ledger.apply_delta(**kwargs)
    assert ledger.inventory() == before
