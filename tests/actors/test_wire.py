"""Wire tier: the codec keeps types, lifts big buffers into frames, and refuses garbage."""

from __future__ import annotations

import random

import msgpack
import numpy as np
import pytest

from iris.base.errors import ProtocolError
from iris.wire import codec, messages


def roundtrip_call(args, kwargs=None):
    frames = messages.encode_call(1, "/a", "m", 1000, args, kwargs or {})
    msg = messages.decode(frames[0], frames[1:])
    return frames, messages.call_arguments(messages.call_from(msg, frames[1:]))


def test_codec_plain_arguments_travel_as_msgpack_and_keep_values():
    frames, (args, kwargs) = roundtrip_call((1, "x", None, [1, 2], {"k": 1.5}), {"flag": True})
    assert len(frames) == 1
    assert args == (1, "x", None, [1, 2], {"k": 1.5}) and kwargs == {"flag": True}


def test_codec_tuples_and_subclasses_fall_back_to_pickle_and_keep_their_type():
    class Label(str):
        pass

    _, (args, _) = roundtrip_call(((1, 2), Label("x"), 2**80))
    assert args[0] == (1, 2) and type(args[0]) is tuple
    assert type(args[1]).__name__ == "Label"
    assert args[2] == 2**80


def test_codec_big_bytes_argument_is_an_extra_frame_not_inline():
    payload = b"z" * (codec.OOB_MIN_BYTES * 4)
    frames, (args, _) = roundtrip_call((payload,))
    assert len(frames) == 2 and frames[1] is payload  # the very object: no copy on send
    assert len(frames[0]) < 200
    assert args[0] == payload and type(args[0]) is bytes


def test_codec_bytearray_and_memoryview_come_back_as_themselves():
    _, (args, _) = roundtrip_call((bytearray(b"ab"), memoryview(b"cd")))
    assert type(args[0]) is bytearray and args[0] == bytearray(b"ab")
    assert type(args[1]) is memoryview and bytes(args[1]) == b"cd"


def test_codec_numpy_array_travels_out_of_band():
    array = np.arange(100_000, dtype=np.float64)
    frames = messages.encode_reply(3, array)
    assert len(frames) == 2 and len(frames[0]) < 1000
    msg = messages.decode(frames[0], frames[1:])
    value = messages.decode_payload(msg[3], msg[4], frames[1:])
    assert np.array_equal(value, array)


@pytest.mark.parametrize("header, problem", [
    (b"", "undecodable"),
    (b"\xc1", "undecodable"),
    (msgpack.packb({"a": 1}), "list"),
    (msgpack.packb([2, messages.CALL, 1]), "version"),
    (msgpack.packb([1, 99, 1]), "unknown message kind"),
    (msgpack.packb([1, messages.CALL, 1, "/a"]), "needs 8 fields"),
    (msgpack.packb([1, messages.CALL, "x", "/a", "m", 1, 0, [[], {}]]), "field 2"),
    (msgpack.packb([1, messages.CALL, 1, "/a", "m", 1, 7, [[], {}]]), "payload format"),
])
def test_decode_malformed_header_raises_protocol_error_naming_the_problem(header, problem):
    with pytest.raises(ProtocolError, match=problem):
        messages.decode(header, [])


def test_decode_ext_marker_without_its_frame_is_a_protocol_error():
    frames = messages.encode_call(1, "/a", "m", 1000, (b"x" * codec.OOB_MIN_BYTES,), {})
    with pytest.raises(ProtocolError, match="buffer marker"):
        messages.decode(frames[0], [])


def test_call_arguments_of_wrong_shape_are_refused():
    header = msgpack.packb([1, messages.CALL, 1, "/a", "m", 1000, 0, "not-a-pair"])
    call = messages.call_from(messages.decode(header, []), [])
    with pytest.raises(ProtocolError, match="args, kwargs"):
        messages.call_arguments(call)


def _roundtrip_reply(value):
    frames = messages.encode_reply(3, value)
    msg = messages.decode(frames[0], frames[1:])
    return frames, messages.decode_payload(msg[3], msg[4], frames[1:])


def test_codec_dict_of_named_arrays_travels_as_msgpack_with_each_big_array_its_own_frame():
    weights = {"embed": np.arange(200_000, dtype=np.float32).reshape(400, 500),
               "bias": np.ones(7, dtype=np.float16),
               "layers": [np.full((64, 1024), i, dtype=np.int8) for i in range(3)]}
    frames, value = _roundtrip_reply(weights)
    assert len(frames) == 5 and len(frames[0]) < 500  # header + 4 big arrays, bias inline
    assert frames[1] is weights["embed"]  # the sender's own memory, not a copy
    for name in ("embed", "bias"):
        assert value[name].dtype == weights[name].dtype
        assert value[name].shape == weights[name].shape
        assert np.array_equal(value[name], weights[name])
    assert [int(a[0, 0]) for a in value["layers"]] == [0, 1, 2]


def test_codec_received_array_is_read_only_and_a_copy_is_writable():
    _, value = _roundtrip_reply({"w": np.zeros(100_000)})
    with pytest.raises(ValueError, match="read-only"):
        value["w"][0] = 1.0
    mine = value["w"].copy()
    mine[0] = 1.0
    assert mine[0] == 1.0


def test_codec_big_bytes_nested_in_containers_become_frames():
    blob = b"q" * (codec.DEEP_LIFT_MIN_BYTES + 1)
    frames, (args, _) = roundtrip_call(({"blob": blob, "n": [1, blob]},))
    assert len(frames) == 3 and len(frames[0]) < 200
    assert args[0]["blob"] == blob and args[0]["n"][1] == blob



def test_codec_a_big_reply_of_small_values_keeps_one_frame_and_round_trips():
    rows = [{"worker_id": f"w{i}", "n": i, "x": i / 7, "a": {"k": "v" * 50}, "b": b"s" * 40}
            for i in range(12_000)]  # over DEEP_LIFT_MIN_BYTES, nothing big inside
    frames, value = _roundtrip_reply({"workers": rows, "nested": [[b"t" * 100]]})
    assert len(frames) == 1 and len(frames[0]) >= codec.DEEP_LIFT_MIN_BYTES
    assert value == {"workers": rows, "nested": [[b"t" * 100]]}
    big = b"q" * codec.OOB_MIN_BYTES  # and one big bytes among them still goes out of band
    frames, value = _roundtrip_reply({"workers": rows, "nested": [[big]]})
    assert len(frames) == 2 and value["nested"][0][0] == big


def test_codec_the_packed_scan_finds_every_big_bytes_the_walk_finds():
    rng = random.Random(32)

    def value(depth: int):
        roll = rng.random()
        if depth > 3 or roll < 0.3:
            return rng.choice([rng.randbytes(rng.choice([0, 300, 65_535, 65_536, 70_000])),
                               rng.random(), rng.randint(-2**63, 2**64 - 1), "x" * 70_000,
                               b"\xc6\x00\x01\x00\x00"])  # a bin 32 header in small bytes
        if roll < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 6))]
        return {str(i): value(depth + 1) for i in range(rng.randint(0, 6))}

    found = 0
    for _ in range(600):
        v = value(0)
        if codec.has_nested_big_bytes(v):
            found += 1
            assert codec.may_hold_big_bytes(codec.packb([1, 3, 7, 0, v], []))
    assert found > 50
    rows = [{"worker_id": f"w{i}", "x": i / 7, "b": b"s" * 40} for i in range(20_000)]
    assert not codec.may_hold_big_bytes(codec.packb({"workers": rows}))

def test_codec_arrays_of_objects_or_strided_views_still_round_trip():
    strided = np.arange(200_000, dtype=np.int64)[::2]
    objects = np.array([{"a": 1}, None], dtype=object)
    _, value = _roundtrip_reply({"s": strided, "o": objects})
    assert np.array_equal(value["s"], strided) and value["o"][0] == {"a": 1}


def test_decode_array_marker_naming_a_missing_frame_is_a_protocol_error():
    marker = msgpack.ExtType(4, msgpack.packb([5, "<f4", [2]]))
    header = msgpack.packb([1, messages.REPLY, 1, codec.FORMAT_MSGPACK, marker])
    with pytest.raises(ProtocolError, match="array marker"):
        messages.decode(header, [b"x"])
