"""A real controller pushes each Region actor what changed in its inventory; a Region that
lost what it was pushed (its actor stopped in the controller's node, and made anew by the
controller) is sent the whole inventory, at the next change and also when nothing changes
(the keepalive). Workers here are registrations over the wire with the cluster token, as a
worker makes them."""

from __future__ import annotations

import iris
from iris.actors.keys import CONTROLLER_KEY, region_key
from iris.base.errors import IrisError
from tests import joining

TPU = {"region": "r1", "accelerator_type": "v5litepod-16", "accelerator_count": "4"}


def test_controller_repairs_a_restarted_region_with_its_whole_inventory(tmp_path, wait_until):
    with iris.local_cluster(workers=0, state_dir=tmp_path) as own, \
            iris.connect(own.address) as client:
        creds: dict[str, bytes] = {}  # each fake host speaks as itself (its credential)

        def call(key: str, method: str, *args, auth: bytes | None = None):
            return client.node.call(own.address, key, method, args, timeout_s=30,
                                    auth=auth).result(60)

        registered: list[str] = []

        def register(host: str, slice_id: str) -> None:
            creds[host] = creds.get(host) or joining.credential(client.node, own.address, host)
            call(CONTROLLER_KEY, "register_worker", host, f"tcp://127.0.0.1:{9000 + len(host)}",
                 {**TPU, "slice_id": slice_id}, [], auth=creds[host])
            registered.append(host)

        def hosts_in_region() -> set[str] | None:
            for host in registered:  # their heartbeats: silent 30 s, they would be lost
                call(CONTROLLER_KEY, "report", host, [], auth=creds[host])
            try:
                inventory = call(region_key("r1"), "inventory")
            except IrisError:  # no Region actor for r1 at this moment
                return None
            return {h for hosts in inventory["slices"].values() for h in hosts}

        for i in range(4):
            register(f"s1-h{i}", "s1")
        first = {f"s1-h{i}" for i in range(4)}
        wait_until(lambda: hosts_in_region() == first, 60, "the region to learn slice s1")
        seq = call(region_key("r1"), "inventory")["seq"]

        # The region's actor stops: what it was pushed is lost. The next change's delta
        # cannot reach it; the controller makes the region anew and sends it the whole
        # inventory (a region that refuses a delta it cannot follow gets the same).
        own.node.unhost(region_key("r1"))
        register("s2-h0", "s2")
        wait_until(lambda: hosts_in_region() == first | {"s2-h0"}, 60,
                   "the whole inventory after the lost delta", explain=hosts_in_region)
        assert call(region_key("r1"), "inventory")["seq"] > seq

        # Stopped again, and nothing changes: the keepalive's empty delta finds it.
        own.node.unhost(region_key("r1"))
        wait_until(lambda: hosts_in_region() == first | {"s2-h0"}, 60,
                   "the whole inventory after a lost keepalive", explain=hosts_in_region)
