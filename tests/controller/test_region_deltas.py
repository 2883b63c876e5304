"""The Region actor's inventory pushes over real sockets: whole (`sync`) and what changed
(`sync_delta`). A delta applies only right after the push it follows; one out of sequence, or
malformed, is refused with an error that says why and changes nothing (the sequence
included: the right delta still applies afterwards). Two real nodes; the caller holds the
controller's own token, as the controller does."""

from __future__ import annotations

import secrets

import pytest

from iris.actors import Node, NodeConfig
from iris.actors.keys import region_key
from iris.base.errors import ConflictError, InvalidRequestError, PermissionDeniedError
from iris.controller.regions.region import Region

TOKEN = secrets.token_bytes(32)
KEY = region_key("r1")
SLICES = [{"slice_id": "s1", "accelerator": "v5litepod-16", "hosts": ["s1-h0", "s1-h1"],
           "attributes": {"zone": "r1-a"}},
          {"slice_id": "c1", "hosts": ["c1"]}]


@pytest.fixture
def nodes():
    with Node(NodeConfig()) as server, Node(NodeConfig()) as client:
        server.grant(TOKEN, "controller")
        server.host(KEY, Region, ("r1", [], server.clock))
        yield server, client


def _call(nodes, method: str, *args, auth: bytes | None = TOKEN):
    server, client = nodes
    return client.call(server.address, KEY, method, args, timeout_s=30, auth=auth).result(60)


def _delta(seq: int, **change) -> dict:
    return {"incarnation": "inc-a", "seq": seq, **change}


def _synced(nodes) -> dict:
    _call(nodes, "sync", SLICES, ["c1"], {}, [], "inc-a", 1)
    return _call(nodes, "inventory")


def test_region_applies_deltas_in_sequence(nodes):
    before = _synced(nodes)
    assert (before["seq"], before["busy"]) == (1, ["c1"])
    _call(nodes, "sync_delta", _delta(2, busy=["s1-h0"], free=["c1"]))
    _call(nodes, "sync_delta", _delta(3, slices=[{"slice_id": "s2", "hosts": ["s2-h0"]}],
                                      removed=["c1"]))
    got = _call(nodes, "inventory")
    assert got["seq"] == 3 and got["busy"] == ["s1-h0"]
    assert got["slices"] == {"s1": ["s1-h0", "s1-h1"], "s2": ["s2-h0"]}
    assert got["free_hosts"] == ["s1-h1", "s2-h0"]


@pytest.mark.parametrize("seq", [3, 1, 7])
def test_region_refuses_a_delta_out_of_sequence_and_asks_for_the_whole_inventory(nodes, seq):
    before = _synced(nodes)
    with pytest.raises(ConflictError, match=r"does not follow the last push applied here "
                                            r"\(push 1 of inc-a\); send the whole inventory"):
        _call(nodes, "sync_delta", _delta(seq, busy=["s1-h0"]))
    assert _call(nodes, "inventory") == before
    _call(nodes, "sync_delta", _delta(2, busy=["s1-h0"]))  # the right one still applies
    assert _call(nodes, "inventory")["busy"] == ["c1", "s1-h0"]


def test_region_refuses_a_delta_of_another_controller_incarnation(nodes):
    before = _synced(nodes)
    with pytest.raises(ConflictError, match="delta 2 of inc-b does not follow"):
        _call(nodes, "sync_delta", {**_delta(2, free=["c1"]), "incarnation": "inc-b"})
    assert _call(nodes, "inventory") == before


def test_region_restarted_refuses_deltas_until_it_gets_the_whole_inventory(nodes):
    server, _ = nodes
    _synced(nodes)
    server.unhost(KEY)  # the region restarts: it holds nothing, and no numbered push
    server.host(KEY, Region, ("r1", [], server.clock))
    with pytest.raises(ConflictError, match=r"\(no numbered push\)"):
        _call(nodes, "sync_delta", _delta(2, busy=["s1-h0"]))
    assert _call(nodes, "inventory")["slices"] == {}
    _call(nodes, "sync", SLICES, ["c1", "s1-h0"], {}, [], "inc-a", 3)
    _call(nodes, "sync_delta", _delta(4, free=["s1-h0"]))
    assert _call(nodes, "inventory")["busy"] == ["c1"]


@pytest.mark.parametrize(("change", "words"), [
    ({"busy": "s1-h0"}, "busy: expected a list"),
    ({"seq": "2"}, "seq: expected an integer"),
    ({"slices": [{"slice_id": "s9", "hosts": []}]}, "slices: slice 's9' has no hosts"),
    ({"color": "red"}, "color: unknown field"),
    ({"removed": ["s9"]}, "removed: no slice 's9' in region 'r1'"),
    ({"slices": [{"slice_id": "s2", "hosts": ["s1-h0"]}]},
     "host 's1-h0' of slice 's2' is already in slice 's1'"),
    ({"slices": [{"slice_id": "s2", "hosts": ["x"]}, {"slice_id": "s3", "hosts": ["x"]}]},
     "host 'x' is in two slices"),
    ({"busy": ["nobody"]}, "busy: host 'nobody' is in no slice"),
    ({"removed": ["c1"], "free": ["c1"]}, "free: host 'c1' is in no slice"),
    ({"drained": ["nobody"]}, "drained: host 'nobody' is in no slice"),
    ({"unmet": {"tpu": 2}}, "unmet: no scale group 'tpu' in this region"),
    ({"unmet": {"tpu": -1}}, r"unmet\['tpu'\]: must be >= 0"),
])
def test_region_refuses_a_malformed_delta_naming_the_problem_and_changes_nothing(
        nodes, change, words):
    before = _synced(nodes)
    with pytest.raises(InvalidRequestError, match=words):
        _call(nodes, "sync_delta", {**_delta(2), **change})
    assert _call(nodes, "inventory") == before
    _call(nodes, "sync_delta", _delta(2, free=["c1"]))  # its sequence did not move either
    assert _call(nodes, "inventory")["busy"] == []


def test_region_deltas_refuse_a_caller_without_the_controllers_token(nodes):
    before = _synced(nodes)
    with pytest.raises(PermissionDeniedError):
        _call(nodes, "sync_delta", _delta(2, free=["c1"]), auth=None)
    assert _call(nodes, "inventory") == before
