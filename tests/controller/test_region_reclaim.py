"""Regions are reclaimed, not only capped: a region no host names for its idle time is
stopped (its actor's thread ends) and forgotten (it no longer counts towards max_regions);
one that keeps a host, or is autoscaled, stays. The rule alone (pure), then a real
controller whose fake workers name made-up regions and leave."""

from __future__ import annotations

import threading

from iris.actors import Node, NodeConfig
from iris.actors.keys import CONTROLLER_KEY, REGION_KEY_PREFIX
from iris.controller.main import host_controller
from iris.controller.reclaim import RegionReclaim
from iris.controller.service import ControllerConfig
from tests import joining

WAIT_S = 120.0


def test_a_region_without_hosts_is_due_only_after_its_idle_time():
    reclaim = RegionReclaim(idle_s=10.0)
    served = {"a", "b", "scaled"}
    assert reclaim.due(served, {"b": 2}, keep={"scaled"}, now=0.0) == []
    assert reclaim.due(served, {"b": 2}, keep={"scaled"}, now=9.9) == []
    assert reclaim.due(served, {"b": 2}, keep={"scaled"}, now=10.0) == ["a"]
    # A host came back to "a" before it was reclaimed: its clock starts again when it goes.
    reclaim = RegionReclaim(idle_s=10.0)
    reclaim.due(served, {}, keep=(), now=0.0)
    reclaim.due(served, {"a": 1}, keep=(), now=5.0)
    assert reclaim.due(served, {}, keep=(), now=12.0) == ["b", "scaled"]  # "a" empty anew
    served = {"a"}  # the controller stopped the two it was told
    assert reclaim.due(served, {}, keep=(), now=21.9) == []
    assert reclaim.due(served, {}, keep=(), now=22.0) == ["a"]


def _regions(node: Node) -> set[str]:
    return {k for k in node.hosted() if k.startswith(REGION_KEY_PREFIX)}


def test_regions_whose_hosts_left_are_stopped_and_forgotten(tmp_path, wait_until):
    node = Node(NodeConfig()).start()
    client = Node(NodeConfig()).start()
    try:
        host_controller(node, ControllerConfig(state_dir=tmp_path / "controller",
                                               worker_dead_after_s=1.0, max_regions=8))
        threads = threading.active_count()

        def call(method, *args, auth=None):
            return client.call(node.address, CONTROLLER_KEY, method, args, timeout_s=30,
                               auth=auth).result(60)

        creds = {}
        for i in range(6):
            wid = f"w-made-up-{i}"
            creds[wid] = joining.credential(client, node.address, wid)
            call("register_worker", wid, f"tcp://127.0.0.1:{9000 + i}", {"region": f"r{i}"},
                 [], auth=creds[wid])
        assert wait_until(lambda: len(_regions(node)) == 6, WAIT_S, "six region actors")
        keep = "w-made-up-0"  # r0 keeps a host: it must stay
        for wid, cred in creds.items():
            if wid != keep:
                call("goodbye", wid, f"tcp://127.0.0.1:{9000 + int(wid[-1])}", auth=cred)

        def alive() -> None:  # r0's host reports (lost after 1 s of silence: come back)
            if call("report", keep, [], auth=creds[keep])["reregister"]:
                call("register_worker", keep, "tcp://127.0.0.1:9000", {"region": "r0"}, [],
                     auth=creds[keep])

        def reclaimed() -> bool:
            alive()
            return _regions(node) == {REGION_KEY_PREFIX + "r0"}

        assert wait_until(reclaimed, WAIT_S, "the empty regions to be reclaimed")
        assert set(call("regions")) == {"r0"}
        assert wait_until(lambda: alive() or threading.active_count() <= threads + 1, WAIT_S,
                          "the reclaimed regions' threads to end")
        # Forgotten, not only stopped: eight new regions fit under max_regions=8 again
        # (r0 and seven more), each made anew when a host names it.
        for i in range(10, 17):
            wid = f"w-new-{i}"
            cred = joining.credential(client, node.address, wid)
            call("register_worker", wid, f"tcp://127.0.0.1:{9100 + i}", {"region": f"n{i}"},
                 [], auth=cred)
        assert wait_until(lambda: alive() or len(_regions(node)) == 8, WAIT_S,
                          "eight region actors")
    finally:
        client.stop()
        node.stop()


def test_per_worker_figures_are_dropped_once_the_worker_is_gone():
    from iris.controller.reclaim import drop_absent

    stats = {"w1": {"log_shipping": {}}, "w2": {}, "gone": {}}
    assert drop_absent(stats, {"w1": object(), "w2": object()}) == 1
    assert set(stats) == {"w1", "w2"}
