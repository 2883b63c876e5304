"""Ids: hex of the asked length, distinct, and distinct between a process and its forked
child (the generator is reseeded there)."""

from __future__ import annotations

import os

from iris.base.ids import new_id


def test_ids_are_hex_of_the_asked_length_and_distinct():
    ids = {new_id("ev-") for _ in range(10_000)}
    assert len(ids) == 10_000
    one = next(iter(ids))
    assert one.startswith("ev-") and len(one) == 3 + 12 and int(one[3:], 16) >= 0
    assert len(new_id(nbytes=3)) == 6


def test_a_forked_child_draws_other_ids_than_its_parent():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.write(write, " ".join(new_id() for _ in range(5)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = set(os.read(read, 4096).decode().split())
    os.close(read)
    assert len(child) == 5 and not child & {new_id() for _ in range(5)}
