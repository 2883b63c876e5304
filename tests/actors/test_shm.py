"""Actor tier: shared-memory segments in one process — reuse only after release, late readers
refused, spans checked."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from iris.actors import shm
from iris.base.errors import ProtocolError

MiB = 1 << 20


def frames_with(array) -> list:
    return [b"header", array]


def test_segment_is_reused_only_after_its_receiver_dropped_every_view():
    pool = shm.Pool(keep_bytes=64 * MiB)
    first, seg = pool.spill(frames_with(np.full(MiB, 1, dtype=np.uint8)), MiB)
    pool.sent(seg, slots=1, answers=0, deadline=1e9)
    view = shm.resolve(first[1:])[0]  # the receiver maps it and keeps a view
    pool.sweep(now=0.0)
    _, other = pool.spill(frames_with(np.full(MiB, 2, dtype=np.uint8)), MiB)
    assert other is not seg and view[0] == 1  # still held: a new segment, data untouched
    del view
    gc.collect()
    pool.sweep(now=0.0)
    _, again = pool.spill(frames_with(np.full(MiB, 3, dtype=np.uint8)), MiB)
    assert again is seg  # released: refilled, its pages already faulted in
    pool.close()


def test_message_read_after_its_segment_was_reused_is_refused_not_misread():
    pool = shm.Pool(keep_bytes=64 * MiB)
    first, seg = pool.spill(frames_with(np.zeros(MiB, dtype=np.uint8)), MiB)
    pool.sent(seg, slots=1, answers=0, deadline=1e9)
    shm.resolve(first[1:])  # mapped, and released at once (no view kept)
    gc.collect()
    pool.sweep(now=0.0)
    pool.spill(frames_with(np.ones(MiB, dtype=np.uint8)), MiB)  # reused for a new message
    with pytest.raises(ProtocolError, match="reused"):
        shm.resolve(first[1:])
    pool.close()


def test_segment_never_mapped_is_closed_at_its_deadline():
    pool = shm.Pool(keep_bytes=64 * MiB)
    frames, seg = pool.spill(frames_with(np.zeros(MiB, dtype=np.uint8)), MiB)
    pool.sent(seg, slots=1, answers=0, deadline=10.0)
    pool.sweep(now=11.0)
    assert pool.busy() == 0
    with pytest.raises(ProtocolError, match="gone"):
        shm.resolve(frames[1:])


def test_small_frames_stay_in_the_message():
    pool = shm.Pool(keep_bytes=MiB)
    frames = frames_with(np.zeros(1000, dtype=np.uint8))
    assert pool.spill(frames, MiB) == (frames, None)


def resident_bytes(segment: shm.Segment) -> int:
    import os

    return os.fstat(segment.fd).st_blocks * 512  # a memfd's pages allocated so far


def test_warmed_segment_is_faulted_in_before_the_first_send_and_used_by_it():
    pool = shm.Pool(keep_bytes=64 * MiB)
    pool.warm(8 * MiB, count=1).join(60)
    (warm,) = pool._free
    assert resident_bytes(warm) >= 8 * MiB  # populated: the send copies, no page faults
    fresh = shm.Segment(8 * MiB)
    assert resident_bytes(fresh) < MiB  # what a send without warm() starts from
    fresh.close()
    frames, seg = pool.spill(frames_with(np.full(8 * MiB, 7, dtype=np.uint8)), MiB)
    assert seg is warm and shm.resolve(frames[1:])[0][-1] == 7
    pool.sweep(now=1e6)  # unused for days still counts as warm until first used: kept
    pool.close()


def test_send_arriving_while_its_segment_is_warming_waits_for_it():
    pool = shm.Pool(keep_bytes=64 * MiB)
    thread = pool.warm(16 * MiB, count=1)
    _, seg = pool.spill(frames_with(np.ones(16 * MiB, dtype=np.uint8)), MiB)
    thread.join(60)
    assert resident_bytes(seg) >= 16 * MiB and pool._free == []  # that one, not a second
    pool.close()
