"""SliceManager over a SimulatedProvider driven by a FakeClock: decisions become slices."""

from __future__ import annotations

import threading

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import ProviderError
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import SliceState
from iris.controller.providers.simulated import SimulatedProvider
from iris.controller.regions.autoscaler import AutoscalerConfig, Create, Delete, SliceUsage
from iris.controller.regions.scaler import SliceManager
from tests.scaler_steps import settle

CFG = AutoscalerConfig(scale_up_delay_s=10, scale_down_delay_s=100, backoff_initial_s=60,
                       backoff_max_s=480, churn_window_s=300, churn_limit=3,
                       churn_cooldown_s=1000, boot_timeout_s=600, host_lost_grace_s=30,
                       poll_interval_s=2)


def group(name: str = "v5e", *, lo: int = 0, hi: int = 4, buf: int = 0,
          zones: tuple[str, ...] = ("us-a", "us-b")) -> ScaleGroupConfig:
    return ScaleGroupConfig(name=name, region="us", accelerator_type="tpu",
                            accelerator_variant="v5litepod-16", hosts_per_slice=4,
                            accelerators_per_host=4, zones=zones, min_slices=lo,
                            max_slices=hi, buffer_slices=buf, provider="simulated")


class Rig:
    """A manager, its simulated fleet and clock, and work that fills READY slices: `work`
    says how many slices' worth each group has; what does not fit is the unmet demand."""

    def __init__(self, groups, provider_cls=SimulatedProvider, **provider_kw):
        self.clock = FakeClock(start=0.0)
        self.provider = provider_cls(self.clock, **provider_kw)
        self.managers: list[SliceManager] = []
        self.mgr = self.manager(groups)
        self.work: dict[str, int] = {}
        self.missing: dict[str, int] = {}  # slice -> hosts whose worker is gone

    def manager(self, groups, prefix: str = "us-t") -> SliceManager:
        mgr = SliceManager("us", groups, self.provider, self.clock, CFG, id_prefix=prefix,
                           max_workers=2)
        self.managers.append(mgr)
        return mgr

    def ready(self) -> list:
        return sorted((s for s in SimulatedProvider.list_slices(self.provider)
                       if s.state is SliceState.READY), key=lambda s: s.slice_id)

    def demand(self) -> tuple[dict[str, SliceUsage], dict[str, int]]:
        usage, placed = {}, {}
        for s in self.ready():
            n, busy = len(s.hosts), placed.get(s.group, 0) < self.work.get(s.group, 0)
            placed[s.group] = placed.get(s.group, 0) + busy
            usage[s.slice_id] = SliceUsage(n - self.missing.get(s.slice_id, 0), n * busy)
        return usage, {g: w - placed.get(g, 0) for g, w in self.work.items()}

    def step(self, dt: float = 0.0, mgr: SliceManager | None = None) -> list[Create | Delete]:
        """Advance, then tick until settled; every decision made on the way."""
        return settle(mgr or self.mgr, self.clock, self.demand, dt)

    def ids(self, state: SliceState | None = None) -> list[str]:
        return sorted(s.slice_id for s in SimulatedProvider.list_slices(self.provider)
                      if state in (None, s.state))

    def close(self) -> None:
        for mgr in self.managers:
            mgr.close()


@pytest.fixture
def rig():
    rigs: list[Rig] = []

    def make(*groups, **kw) -> Rig:
        r = Rig(list(groups) or [group()], **kw)
        rigs.append(r)
        return r

    yield make
    for r in rigs:
        r.close()


def test_manager_first_list_before_deciding_then_min_slices_created(rig):
    r = rig(group(lo=2))
    assert r.mgr.tick({}, {}) == []  # the first list is not back: nothing is decided yet
    r.step()
    assert len(r.ids(SliceState.READY)) == 2
    assert r.mgr.status()["in_flight"] == {"creates": [], "deletes": [], "draining": [],
                                           "listing": False}


def test_manager_restarted_region_adopts_its_slices_instead_of_duplicating(rig):
    r = rig(group(lo=2))
    r.step()
    before = r.ids()
    r.mgr.close()  # does not delete slices
    again = r.manager([group(lo=2)], prefix="us-u")
    assert r.step(mgr=again) == []
    assert r.ids() == before
    assert {s["slice_id"] for s in again.status()["groups"][0]["slices"]} == set(before)


def test_manager_demand_creates_after_scale_up_delay(rig):
    r = rig()
    r.work = {"v5e": 2}
    assert r.step() == []
    assert r.step(dt=9) == []
    out = r.step(dt=1)
    assert [type(d).__name__ for d in out] == ["Create", "Create"]
    assert len(r.ids(SliceState.READY)) == 2
    assert r.step(dt=1000) == []  # the work landed on them: nothing more


def test_manager_zone_stockout_goes_to_next_zone_and_blocked_names_it(rig):
    r = rig(zone_capacity={"us-a": 0})
    r.work = {"v5e": 1}
    r.step()
    out = r.step(dt=10)  # us-a refuses and backs off; us-b is asked next
    assert [d.zone for d in out] == ["us-a", "us-b"]
    assert [s.zone for s in r.provider.list_slices()] == ["us-b"]
    r.provider.set_capacity("us-b", 4)  # full now
    r.work = {"v5e": 2}
    r.step()
    r.step(dt=10)
    blocked = r.mgr.blocked()["v5litepod-16"]
    assert "zone us-a stocked out" in blocked and "zone us-b stocked out" in blocked
    assert "no capacity for 4 more" in blocked  # the provider's own words
    assert r.mgr.status()["decisions"][-1]["action"] == "create_failed"


def test_manager_slow_create_shows_creating_and_tick_does_not_wait(rig):
    gate = threading.Event()

    class Slow(SimulatedProvider):
        def create_slice(self, g, zone, slice_id):
            assert gate.wait(60)
            return super().create_slice(g, zone, slice_id)

    r = rig(group(lo=1), provider_cls=Slow)
    r.mgr.tick({}, {})
    assert r.mgr.settle(60)
    [c] = r.mgr.tick({}, {})  # returns while the create is blocked in the provider
    assert [(s.slice_id, s.state) for s in r.mgr.slices()] == [(c.slice_id, SliceState.CREATING)]
    assert r.mgr.scaling_up() == {"v5litepod-16": ["us"], "v5litepod": ["us"]}
    assert r.mgr.status()["in_flight"]["creates"] == [c.slice_id]
    assert r.mgr.tick({}, {}) == []  # no second create while the first is in flight
    gate.set()
    r.step()
    assert r.ids(SliceState.READY) == [c.slice_id]


def test_manager_preempted_slice_deleted_and_replaced_while_demand_remains(rig):
    r = rig()
    r.work = {"v5e": 1}
    r.step(dt=10)
    r.step(dt=10)
    [old] = r.ids()
    r.provider.preempt(old)
    out = r.step(dt=400)
    assert [(type(d).__name__, d.slice_id, d.cause) for d in out] == [
        ("Delete", old, "preempted")]
    assert r.ids() == []
    [new] = r.step(dt=10)  # its work is still pending: replaced after the scale-up delay
    assert r.ids(SliceState.READY) == [new.slice_id] != [old]


def test_manager_preempted_slice_without_work_not_replaced(rig):
    r = rig()
    r.work = {"v5e": 1}
    r.step(dt=10)
    r.step(dt=10)
    r.provider.preempt(r.ids()[0])
    r.work = {}
    r.step(dt=400)
    assert r.step(dt=400) == [] and r.ids() == []


def test_manager_young_preemptions_hold_the_group_in_cooldown(rig):
    r = rig()
    r.work = {"v5e": 1}
    r.step(dt=10)
    for _ in range(3):
        r.step(dt=10)
        r.provider.preempt(r.ids()[0])
        r.step(dt=CFG.poll_interval_s)  # seen at the next list
    assert r.ids() == []
    assert r.step(dt=10) == []  # the demand is ripe, but the group cools down
    assert "churn cooldown" in r.mgr.blocked()["v5litepod-16"]
    assert r.step(dt=490) == []
    assert len(r.step(dt=500)) == 1  # cooldown over: the work gets its slice


def test_manager_slice_losing_a_host_deleted_whole(rig):
    r = rig()
    r.work = {"v5e": 1}
    r.step(dt=10)
    r.step(dt=10)
    [sid] = r.ids()
    r.missing[sid] = 1
    assert r.step() == []  # noticed now: the grace starts
    assert r.step(dt=29) == []
    [d] = r.step(dt=1)
    assert (d.slice_id, d.cause, len(d.hosts)) == (sid, "lost_host", 4)
    assert r.ids() == []


def test_manager_idle_slice_deleted_after_delay_but_min_kept(rig):
    r = rig(group(lo=1))
    r.step()
    r.work = {"v5e": 2}
    r.step(dt=10)
    r.step(dt=10)
    assert len(r.ids()) == 2
    r.work = {}
    r.step()
    assert r.step(dt=99) == []
    [d] = r.step(dt=1)
    assert d.cause == "idle" and len(r.ids()) == 1
    assert r.step(dt=1000) == [] and len(r.ids()) == 1


def test_manager_boot_timeout_deletes_a_slice_that_never_boots(rig):
    r = rig(boot_delay_s=10_000)
    r.work = {"v5e": 1}
    r.step(dt=10)
    [c] = r.step(dt=10)
    out = r.step(dt=600)
    assert [(type(d).__name__, d.zone if isinstance(d, Create) else d.cause) for d in out] == [
        ("Delete", "boot_timeout"), ("Create", "us-b")]
    assert c.slice_id not in r.ids()


def test_manager_list_failure_keeps_the_last_view_and_says_why(rig):
    fail = threading.Event()

    class Flaky(SimulatedProvider):
        def list_slices(self, group=None):
            if fail.is_set():
                raise ProviderError("list nodes: 503 backend unavailable")
            return super().list_slices(group)

    r = rig(group(lo=1), provider_cls=Flaky)
    r.step()
    fail.set()
    assert r.step(dt=5) == []
    assert "503" in r.mgr.status()["list_error"]
    assert len(r.mgr.slices()) == 1


def test_manager_failed_delete_retried_later_and_slice_goes(rig):
    refuse = threading.Event()
    refuse.set()

    class Stubborn(SimulatedProvider):
        def delete_slice(self, slice_id):
            if refuse.is_set():
                refuse.clear()
                raise ProviderError(f"delete {slice_id}: 429 rate limited")
            super().delete_slice(slice_id)

    r = rig(provider_cls=Stubborn)
    r.work = {"v5e": 1}
    r.step(dt=10)
    r.step(dt=10)
    [sid] = r.ids()
    r.provider.preempt(sid)
    r.step(dt=2)
    assert r.ids() == [sid]  # refused once
    assert r.mgr.status()["decisions"][-1]["reason"] == f"delete {sid}: 429 rate limited"
    r.step(dt=60)
    assert sid not in r.ids()


def test_manager_create_conflict_adopts_the_existing_slice(rig):
    hidden = {"us-t-v5e-1"}

    class Lagging(SimulatedProvider):  # its list does not show the slice at first
        def list_slices(self, group=None):
            return [s for s in super().list_slices(group) if s.slice_id not in hidden]

    r = rig(group(lo=1), provider_cls=Lagging)
    # A create that happened although its reply was lost: the retry meets ConflictError.
    r.provider.create_slice(group(lo=1), "us-a", "us-t-v5e-1")
    assert [d.slice_id for d in r.step()] == ["us-t-v5e-1"]
    assert [d["action"] for d in r.mgr.status()["decisions"]] == ["create"]  # no failure
    hidden.clear()  # the list catches up
    assert r.step(dt=100) == []  # adopted: it counts toward the min
    assert [(s.slice_id, s.state) for s in r.mgr.slices()] == [("us-t-v5e-1", SliceState.READY)]


def test_manager_bad_unmet_refused_and_nothing_created(rig):
    r = rig()
    r.step()
    with pytest.raises(ValueError, match="no scale group 'h100'"):
        r.mgr.tick({}, {"h100": 1})
    assert r.ids() == [] and r.mgr.status()["in_flight"]["creates"] == []


@pytest.mark.slow
def test_manager_local_provider_replaces_a_killed_slice_of_real_workers(tmp_path):
    """Real worker processes (LocalProvider) registering with a real local controller."""
    import iris
    from iris.controller.providers.local import LocalProvider

    cpu = ScaleGroupConfig("cpu", "us", "cpu", None, 1, 0, ("us-a",), min_slices=1,
                           provider="local")
    clock = FakeClock(start=0.0)
    config = AutoscalerConfig(hosts_register=False, poll_interval_s=1.0)
    with iris.local_cluster() as cluster:
        provider = LocalProvider(cluster.address, tmp_path, "us")
        mgr = SliceManager("us", [cpu], provider, clock, config, id_prefix="us-l")
        try:
            first = _wait_ready(mgr, clock)
            provider.preempt(first)  # SIGKILL: the cloud took the machine back
            second = _wait_ready(mgr, clock, exclude=first)
            assert [s.slice_id for s in provider.list_slices()] == [second]
            decisions = [(d["action"], d["slice_id"]) for d in mgr.status()["decisions"]]
            assert decisions == [("create", first), ("delete", first), ("create", second)]
        finally:
            mgr.close()
            provider.close()


def _wait_ready(mgr: SliceManager, clock: FakeClock, exclude: str = "") -> str:
    """Tick until a READY slice other than `exclude` is listed (workers take seconds to
    boot, so this polls the real processes, with a 60 s deadline)."""
    deadline = threading.Event()
    timer = threading.Timer(60, deadline.set)
    timer.start()
    try:
        while not deadline.is_set():
            clock.advance(1.0)
            mgr.tick({}, {})
            assert mgr.settle(60)
            ready = [s.slice_id for s in mgr.slices()
                     if s.state is SliceState.READY and s.slice_id != exclude]
            if ready:
                return ready[0]
            deadline.wait(0.2)
    finally:
        timer.cancel()
    raise AssertionError(f"no READY slice within 60 s: {mgr.status()}")
