"""Received buffers copied into new bytes and bytearray objects (iris/wire/copies.py): the
same contents and type as bytes(view) / bytearray(view) for every size and source, and no
reference left behind (a leaked reference would keep every big payload alive)."""

from __future__ import annotations

import os
import sys

import pytest

from iris.wire import copies

SIZES = [0, 1, copies.HUGE_MIN_BYTES - 1, copies.HUGE_MIN_BYTES, 9 * 2**20 + 17]


@pytest.mark.parametrize("size", SIZES)
def test_copies_match_the_plain_copy_from_any_source(size):
    data = os.urandom(size)
    for source in (memoryview(data), memoryview(bytearray(data)),
                   memoryview(bytearray(data)).toreadonly()):
        as_bytes, as_bytearray = copies.to_bytes(source), copies.to_bytearray(source)
        assert type(as_bytes) is bytes and as_bytes == data
        assert type(as_bytearray) is bytearray and as_bytearray == data
        assert hash(as_bytes) == hash(data)
        if size >= copies.HUGE_MIN_BYTES:  # made here (small bytes may be shared singletons)
            assert sys.getrefcount(as_bytes) == 2 and sys.getrefcount(as_bytearray) == 2


def test_copies_of_a_view_in_another_format_are_its_bytes():
    data = os.urandom(copies.HUGE_MIN_BYTES + 4096)
    view = memoryview(data).cast("I")
    assert copies.to_bytes(view) == data
    assert copies.to_bytearray(view) == data


def test_copied_bytearray_is_its_own_memory():
    data = bytearray(os.urandom(copies.HUGE_MIN_BYTES))
    copy = copies.to_bytearray(memoryview(data))
    copy[0] ^= 0xFF
    assert copy[0] != data[0] and copy[1:] == data[1:]
