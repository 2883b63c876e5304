"""Gang messages survive msgpack as plain dicts; malformed ones are refused."""

from __future__ import annotations

import msgpack
import pytest

from iris.base.errors import ProtocolError
from iris.controller.gangs.protocol import (
    AbortRequest,
    CommitRefused,
    CommitRequest,
    Committed,
    Refused,
    Released,
    ReleaseRequest,
    Reserved,
    ReserveRequest,
    decode_message,
    encode_message,
)
from iris.controller.scheduling.constraints import parse_constraints
from iris.controller.scheduling.model import GangShape

SHAPE = GangShape("v5litepod-16", 8, 2, parse_constraints(
    {"zone": {"in": ["a", "b"]}, "tier": {"ne": "spot"}, "gpu": {"exists": False}}))

MESSAGES = [
    ReserveRequest("g1", 3, SHAPE, 10.0),
    ReserveRequest("g1", 3, GangShape(None, 2), 5),
    CommitRequest("g1", 3, "r1/b/7"),
    AbortRequest("g1", 3),
    ReleaseRequest("g1", "r1/b/7"),
    Reserved("r1", "g1", 3, "r1/b/7", ("h1", "h2"), 12.5),
    Refused("r1", "g1", 3, "NO_CAPACITY", "full"),
    Committed("r1", "g1", 3, "r1/b/7", ("h1", "h2")),
    CommitRefused("r1", "g1", 3, "r1/b/7", "EXPIRED", "lease ran out"),
    Released("r1", "g1", "r1/b/7"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_coordinator_wire_message_round_trips_through_msgpack(msg):
    assert decode_message(msgpack.unpackb(msgpack.packb(encode_message(msg)))) == msg


@pytest.mark.parametrize(("data", "words"), [
    ({"type": "Nope"}, "unknown or missing 'type'"),
    ([1, 2], "unknown or missing 'type'"),
    ({"type": "AbortRequest", "gang_id": "g"}, "AbortRequest.attempt: missing"),
    ({"type": "AbortRequest", "gang_id": "g", "attempt": "1"}, "AbortRequest.attempt"),
    ({"type": "AbortRequest", "gang_id": "g", "attempt": True}, "AbortRequest.attempt"),
    ({"type": "Reserved", "region": "r", "gang_id": "g", "attempt": 1, "token": "t",
      "hosts": "h1", "expires_at": 1.0}, "Reserved.hosts: expected a list"),
    ({"type": "ReserveRequest", "gang_id": "g", "attempt": 1, "lease_s": 1.0,
      "shape": {"accelerator": None, "hosts": 0, "whole_slices": 0, "constraints": []}},
     "hosts must be >= 1"),
    ({"type": "ReserveRequest", "gang_id": "g", "attempt": 1, "lease_s": 1.0,
      "shape": {"accelerator": None, "hosts": 1, "whole_slices": 0,
                "constraints": [{"key": "k", "op": "like", "values": [], "exists": True}]}},
     "ReserveRequest.shape.constraints[0].op: expected one of 'eq'"),
])
def test_coordinator_wire_malformed_message_names_the_field(data, words):
    with pytest.raises(ProtocolError) as err:
        decode_message(data)
    assert words in str(err.value)


def test_coordinator_wire_refuses_to_encode_foreign_objects():
    with pytest.raises(ProtocolError, match="not a gang protocol message"):
        encode_message(object())
