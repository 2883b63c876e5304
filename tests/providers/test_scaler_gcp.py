"""SliceManager over GcpTpuProvider: the real tpu_v2 REST client against the fake TPU server.

The manager runs on a FakeClock; its provider calls are real HTTP to 127.0.0.1 on the
manager's pools. Work fills READY nodes (what their registered workers would report) and what
does not fit is the unmet demand, as in tests/controller/test_scaler.py. Deterministic:
each step ticks, settles the provider calls, and ticks again until nothing is in flight.
"""

from __future__ import annotations

import threading

import pytest

from iris.base.clock import FakeClock
from iris.controller.config import ClusterConfig, parse_config
from iris.controller.providers.base import SliceState
from iris.controller.providers.gcp_tpu import GcpTpuProvider, make_tpu_client
from iris.controller.regions.autoscaler import AutoscalerConfig, Create, Delete, SliceUsage
from iris.controller.regions.scaler import SliceManager
from tests.providers.conftest import FAST_GCP, REGION, ZONE_A, ZONE_B
from tests.providers.fake_tpu_server import FakeTpuServer
from tests.scaler_steps import settle

GROUP, ACCEL = "v5e-16", "v5litepod-16"  # 4 hosts a slice, zones A then B
CFG = AutoscalerConfig(scale_up_delay_s=10, scale_down_delay_s=100, backoff_initial_s=60,
                       backoff_max_s=480, boot_timeout_s=600, host_lost_grace_s=30,
                       poll_interval_s=2)


def _config() -> ClusterConfig:
    """One region with one GCP group (the shared cluster_config's region mixes providers)."""
    return parse_config({
        "name": "test",
        "controller": {"address": "tcp://10.1.2.3:7100"},
        "storage": {"log_bucket": "iris-test-logs"},
        "gcp": {"project": "test-proj", "iris_package": "iris==0.1.0"},
        "regions": {REGION: {"zones": [ZONE_A, ZONE_B], "scale_groups": {
            GROUP: {"accelerator_type": "tpu", "accelerator_variant": ACCEL,
                    "max_slices": 8, "preemptible": True}}}},
    })


class GcpRig:
    """Managers over one fake server and clock; `work` says how many slices' worth of work
    the group has. Each manager gets its own provider (client), as a restarted region would."""

    def __init__(self, server: FakeTpuServer):
        self.server = server
        self.clock = FakeClock(start=0.0)
        self.config = _config()
        self.providers: list[GcpTpuProvider] = []
        self.managers: list[SliceManager] = []
        self.work: dict[str, int] = {}
        self.mgr = self.manager("uc2-t")

    def manager(self, prefix: str) -> SliceManager:
        provider = GcpTpuProvider.from_config(
            self.config, REGION, client=make_tpu_client(self.server.url), **FAST_GCP)
        self.providers.append(provider)
        mgr = SliceManager(REGION, [self.config.scale_group(GROUP)], provider, self.clock, CFG,
                           id_prefix=prefix, max_workers=2)
        self.managers.append(mgr)
        return mgr

    def ids(self, state: str | None = None) -> list[str]:
        return [n["name"].rsplit("/", 1)[1] for n in self.server.nodes()
                if state in (None, n["state"])]

    def demand(self) -> tuple[dict[str, SliceUsage], dict[str, int]]:
        """Every host of a READY node has registered; work fills them in name order."""
        usage, placed = {}, 0
        for node in self.server.nodes():
            if node["state"] != "READY" or node["labels"]["iris-group"] != GROUP:
                continue
            n, busy = len(node["networkEndpoints"]), placed < self.work.get(GROUP, 0)
            placed += busy
            usage[node["name"].rsplit("/", 1)[1]] = SliceUsage(n, n * busy)
        return usage, {g: w - placed for g, w in self.work.items()}

    def step(self, dt: float = 0.0, mgr: SliceManager | None = None) -> list[Create | Delete]:
        """Advance, then tick until settled; every decision made on the way."""
        return settle(mgr or self.mgr, self.clock, self.demand, dt)

    def close(self) -> None:
        for mgr in self.managers:
            mgr.close()
        for provider in self.providers:
            provider.close()


@pytest.fixture
def rig(fake_tpu: FakeTpuServer):
    r = GcpRig(fake_tpu)
    yield r
    r.server.hold_operations(False)  # a failed test must not leave a create polling
    r.close()


def _zone(name: str) -> str:
    return name.split("/")[3]  # projects/P/locations/Z/nodes/ID


def test_scaler_gcp_demand_creates_node_through_operation_creating_then_ready(rig):
    rig.work = {GROUP: 1}
    assert rig.step() == []  # the demand must persist scale_up_delay_s first
    rig.server.hold_operations()
    rig.clock.advance(10)
    [c] = rig.mgr.tick(*rig.demand())
    assert (type(c), c.zone) == (Create, ZONE_A)
    rig.server.wait_for_request("GET", "/operations/")  # accepted; the client polls its LRO
    assert rig.server.node(c.slice_id)["state"] == "CREATING"
    assert [(s.slice_id, s.state) for s in rig.mgr.slices()] == [(c.slice_id, SliceState.CREATING)]
    assert rig.mgr.scaling_up()[ACCEL] == [REGION]
    assert rig.mgr.tick(*rig.demand()) == []  # no second create while the first is in flight
    rig.server.hold_operations(False)
    assert rig.step() == []
    [ready] = rig.mgr.slices()
    assert (ready.slice_id, ready.state, ready.zone) == (c.slice_id, SliceState.READY, ZONE_A)
    assert [h.host_id for h in ready.hosts] == [f"{c.slice_id}-w{i}" for i in range(4)]
    assert rig.ids("READY") == [c.slice_id]
    assert len(rig.server.requests_for("POST", "/nodes")) == 1
    assert rig.mgr.scaling_up() == {}  # its hosts registered: nothing more on its way


def test_scaler_gcp_stocked_out_zone_backs_off_and_next_zone_gets_the_node(rig):
    rig.server.stock_out(ZONE_A)
    rig.work = {GROUP: 1}
    rig.step()
    out = rig.step(dt=10)  # the create's operation fails RESOURCE_EXHAUSTED in zone A
    assert [(type(d), d.zone) for d in out] == [(Create, ZONE_A), (Create, ZONE_B)]
    assert [(_zone(n["name"]), n["state"]) for n in rig.server.nodes()] == [(ZONE_B, "READY")]
    backoff = rig.mgr.status()["groups"][0]["backoff"]
    assert list(backoff) == [ZONE_A]
    assert f"There is no more capacity in the zone {ZONE_A}" in backoff[ZONE_A]["reason"]
    assert rig.mgr.blocked() == {}  # the work got its node: nothing is held back

    rig.server.stock_out(ZONE_B)  # B runs out too, and more work arrives
    rig.work = {GROUP: 2}
    rig.step()
    rig.step(dt=10)
    blocked = rig.mgr.blocked()[ACCEL]
    for zone in (ZONE_A, ZONE_B):
        assert f"zone {zone} stocked out / quota" in blocked
        assert f"There is no more capacity in the zone {zone}" in blocked  # GCP's words
    assert len(rig.server.nodes()) == 1  # failed creates leave no node behind

    rig.server.stock_out(ZONE_A, on=False)
    [c] = rig.step(dt=60)  # A's backoff is over and it has stock again
    assert c.zone == ZONE_A and c.slice_id in rig.ids("READY")
    assert rig.mgr.blocked() == {}


def test_scaler_gcp_failed_create_listed_while_creating_never_comes_back(rig):
    """GCP lists a node CREATING while its create operation runs. A list asked then must not
    bring the node back once the create failed: the manager would show a slice that does
    not exist, and the autoscaler would count it and hold the work back from the next zone."""
    rig.server.stock_out(ZONE_A)
    rig.work = {GROUP: 1}
    rig.step()
    rig.step(dt=9)  # list now, so that no list runs beside the create below
    rig.server.hold_operations()
    rig.clock.advance(1)
    [c] = rig.mgr.tick(*rig.demand())
    assert c.zone == ZONE_A
    rig.server.wait_for_request("GET", "/operations/")  # the node is CREATING on the server
    lists = len(rig.server.requests_for("GET", f"{ZONE_B}/nodes"))
    rig.clock.advance(CFG.poll_interval_s)
    assert rig.mgr.tick(*rig.demand()) == []  # asks for a list, which sees the node
    rig.server.wait_for_request("GET", f"{ZONE_B}/nodes", count=lists + 1)  # zone A listed
    rig.server.hold_operations(False)  # the create's operation fails: stocked out
    assert rig.mgr.settle(60)
    out = rig.mgr.tick(*rig.demand())
    assert [(type(d), d.zone) for d in out] == [(Create, ZONE_B)]
    assert [s.zone for s in rig.mgr.slices()] == [ZONE_B]
    assert rig.step() == []
    assert [(_zone(n["name"]), n["state"]) for n in rig.server.nodes()] == [(ZONE_B, "READY")]


def test_scaler_gcp_quota_refusal_backs_off_zones_with_reason_naming_quota(rig):
    for zone in (ZONE_A, ZONE_B):
        rig.server.exhaust_quota(zone)
    rig.work = {GROUP: 1}
    rig.step()
    out = rig.step(dt=10)
    assert [(type(d), d.zone) for d in out] == [(Create, ZONE_A), (Create, ZONE_B)]
    blocked = rig.mgr.blocked()[ACCEL]
    for zone in (ZONE_A, ZONE_B):
        assert f"zone {zone} stocked out / quota" in blocked
        assert f"Limit: 0 in zone {zone}" in blocked
    assert "Quota limit 'TPUV4PodPerProjectPerZoneForTPUAPI' has been exceeded" in blocked
    assert rig.server.nodes() == []
    posts = len(rig.server.requests_for("POST", "/nodes"))
    assert rig.step(dt=59) == []  # backing off: GCP is not asked again
    assert len(rig.server.requests_for("POST", "/nodes")) == posts
    rig.server.exhaust_quota(ZONE_A, on=False)
    [c] = rig.step(dt=1)
    assert c.zone == ZONE_A and rig.ids("READY") == [c.slice_id]


@pytest.mark.parametrize(("state", "cause"), [("PREEMPTED", "preempted"),
                                              ("TERMINATED", "failed")])
def test_scaler_gcp_preempted_node_deleted_and_replaced_while_work_remains(rig, state, cause):
    rig.work = {GROUP: 1}
    rig.step()
    rig.step(dt=10)
    [old] = rig.ids("READY")
    rig.server.set_state(old, state)
    out = rig.step(dt=CFG.poll_interval_s)  # seen at the next list
    assert [(type(d), d.slice_id, d.cause) for d in out] == [(Delete, old, cause)]
    assert rig.server.node(old) is None
    assert len(rig.server.requests_for("DELETE", f"/nodes/{old}")) == 1
    [new] = rig.step(dt=10)  # its work is still pending: replaced after the scale-up delay
    assert isinstance(new, Create) and new.slice_id != old
    assert rig.ids() == rig.ids("READY") == [new.slice_id]


def test_scaler_gcp_preemption_handled_while_long_creates_fill_every_thread(rig):
    """A GCP create holds its thread for the minutes its operation runs. While as many as
    the manager has threads are running, a preempted node must still be listed, deleted on
    the server (it counts against quota until then) and replaced."""
    rig.work = {GROUP: 1}
    rig.step()
    rig.step(dt=10)
    [old] = rig.ids()
    rig.work = {GROUP: 3}  # two more: one create per thread of the manager (max_workers=2)
    rig.step()
    rig.step(dt=9)  # list now, so that no list runs beside the creates below
    rig.server.hold_operations()
    posts = len(rig.server.requests_for("POST", "/nodes"))
    rig.clock.advance(1)
    assert [d.zone for d in rig.mgr.tick(*rig.demand())] == [ZONE_A, ZONE_A]
    rig.server.wait_for_request("POST", "/nodes", count=posts + 2)
    rig.server.preempt(old)
    rig.clock.advance(CFG.poll_interval_s)
    decisions: list[Create | Delete] = []
    stop = threading.Event()

    def region_turns() -> None:  # the region actor ticks on its own; the clock stands still
        while not stop.wait(0.01):
            decisions.extend(rig.mgr.tick(*rig.demand()))

    ticker = threading.Thread(target=region_turns, name="test-region-turns")
    ticker.start()
    try:
        rig.server.wait_for_request("DELETE", f"/nodes/{old}", timeout=60)
    finally:
        stop.set()
        ticker.join(60)
    # Its work was pending all along, so its replacement is asked for at once (queued
    # behind the running creates).
    assert sorted((type(d).__name__, getattr(d, "cause", "")) for d in decisions) == [
        ("Create", ""), ("Delete", "preempted")]
    rig.server.hold_operations(False)
    assert rig.step() == []
    assert len(rig.ids("READY")) == 3 and old not in rig.ids()
    assert len(rig.server.requests_for("POST", "/nodes")) == posts + 3


def test_scaler_gcp_idle_node_deleted_on_server_after_scale_down_delay(rig):
    rig.work = {GROUP: 1}
    rig.step()
    rig.step(dt=10)
    [sid] = rig.ids()
    rig.work = {}
    rig.step()  # idle from now
    assert rig.step(dt=99) == []
    [d] = rig.step(dt=1)
    assert (type(d), d.slice_id, d.cause) == (Delete, sid, "idle")
    assert rig.server.nodes() == []
    assert len(rig.server.requests_for("DELETE", f"/nodes/{sid}")) == 1


def test_scaler_gcp_restarted_manager_adopts_nodes_without_creating_again(rig):
    rig.work = {GROUP: 2}
    rig.step()
    rig.step(dt=10)
    before = rig.ids("READY")
    assert len(before) == 2
    rig.mgr.close()  # the region restarts; its nodes stay
    rig.server.set_state(before[1], "RESTARTING")  # one is booting again as it comes back
    rig.server.max_page_size = 1  # the restarted region's list pages through them
    posts = len(rig.server.requests_for("POST", "/nodes"))
    again = rig.manager("uc2-u")
    assert again.tick(*rig.demand()) == []  # nothing decided before the first list
    assert rig.step(mgr=again) == []
    assert rig.step(dt=100, mgr=again) == []  # the booting node absorbs its unmet work
    seen = {(s["slice_id"], s["state"]) for s in again.status()["groups"][0]["slices"]}
    assert seen == {(before[0], "READY"), (before[1], "CREATING")}
    rig.server.set_state(before[1], "READY")
    assert rig.step(dt=100, mgr=again) == []
    assert rig.ids("READY") == before
    assert len(rig.server.requests_for("POST", "/nodes")) == posts
