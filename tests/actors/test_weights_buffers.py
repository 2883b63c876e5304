"""Cluster tier: a Publisher's writable buffers (Publisher.buffers) — weights filled in place
in shared memory reach subscribers in other processes exactly as written and without a
copy; no reader ever sees a torn version; a version filled but not published (the trainer
raised, or died mid-fill) is never sent."""

from __future__ import annotations

import hashlib
import os
import signal

import numpy as np
import pytest

import iris

ROLLOUT = """
import hashlib, os, threading
import numpy as np
import iris

ctx = iris.connect()
sub = iris.weights.Subscriber("policy")

@iris.actor
class Probe:
    def __init__(self):
        self.kept = None
    def digests(self, max_stale):
        version, weights = sub.get(max_stale=max_stale, timeout=120)
        return [version, {k: [str(v.dtype), list(v.shape), hashlib.sha256(v).hexdigest()]
                          for k, v in weights.items()}]
    def keep(self):
        self.kept = sub.get(timeout=120)
        return self.kept[0]
    def kept_values(self):
        version, weights = self.kept
        return [version, sorted({float(x) for v in weights.values() for x in np.unique(v)})]
    def drop(self):
        self.kept = None
    def held(self):
        return [sub.version, sorted({float(x) for v in sub._box.weights.values()
                                     for x in np.unique(v)})]
    def segments(self):
        with open("/proc/self/maps") as maps:
            return sorted({int(line.split()[4]) for line in maps if "memfd:iris-shm" in line})

Probe.serve(os.environ["PROBE"])
print("READY", flush=True)
threading.Event().wait()
"""

LAYOUT = {"layer0.w": ((512, 1024), "float32"), "layer0.b": ((1024,), "float32"),
          "step": ((1,), "int64"), "layer1.w": ((300_001,), "float16")}


def start_rollouts(child_process, cluster, count):
    probes = []
    for i in range(count):
        child = child_process(ROLLOUT, {"IRIS_ADDRESS": cluster.address, "PROBE": f"probe{i}"})
        child.wait_ready()
        probes.append(iris.resolve(f"probe{i}", timeout=60))
    return probes


def wait_for_subscribers(count, wait_until):
    wait_until(lambda: len(iris.resolve_all("policy.rollouts")) == count, 60,
               f"{count} subscribers")


def fill(buffers: dict, value: float) -> None:
    for array in buffers.values():
        array.fill(value)


def test_a_subscriber_in_another_process_sees_exactly_what_was_written(cluster, child_process,
                                                                       wait_until):
    pub = iris.weights.Publisher("policy")
    probes = start_rollouts(child_process, cluster, 2)
    wait_for_subscribers(2, wait_until)
    pool = iris.current().node._pool
    rng = np.random.default_rng(7)
    for version in (1, 2, 3):
        buffers = pub.buffers(LAYOUT if version == 1 else None)
        for array in buffers.values():
            array[...] = rng.integers(0, 100, array.shape).astype(array.dtype)
        want = {k: [str(v.dtype), list(v.shape), hashlib.sha256(v).hexdigest()]
                for k, v in buffers.items()}
        copied = pool.copied_bytes
        assert pub.publish(buffers) == version and pub.last_failures == {}
        assert pool.copied_bytes == copied  # sent from where it was written
        assert [p.digests(0).result(60) for p in probes] == [[version, want]] * 2
        assert not buffers["layer0.w"].flags.writeable  # published: read-only from here on
    published = pub._buffers._published.inode
    assert all(published in p.segments().result(60) for p in probes)


def test_a_version_a_reader_still_holds_is_never_overwritten(cluster, child_process,
                                                             wait_until):
    pub = iris.weights.Publisher("policy")
    reader, other = start_rollouts(child_process, cluster, 2)
    wait_for_subscribers(2, wait_until)
    buffers = pub.buffers(LAYOUT)
    fill(buffers, 1)
    pub.publish(buffers)
    assert reader.keep().result(60) == 1  # holds version 1 past its replacement
    for version in range(2, 7):
        buffers = pub.buffers()
        fill(buffers, version)
        pub.publish(buffers)
        assert reader.kept_values().result(60) == [1, [1.0]]
        assert other.held().result(60) == [version, [float(version)]]
    assert reader.held().result(60) == [6, [6.0]]
    reader.drop().result(60)  # version 1's segment is free again: no new one is made
    made = len(pub._buffers._segments)
    for version in range(7, 11):
        buffers = pub.buffers()
        fill(buffers, version)
        pub.publish(buffers)
        assert other.held().result(60) == [version, [float(version)]]
    assert len(pub._buffers._segments) <= made


def test_buffers_filled_but_not_published_are_never_sent(cluster, child_process, wait_until):
    pub = iris.weights.Publisher("policy")
    (probe,) = start_rollouts(child_process, cluster, 1)
    wait_for_subscribers(1, wait_until)
    buffers = pub.buffers(LAYOUT)
    fill(buffers, 1)
    pub.publish(buffers)
    with pytest.raises(RuntimeError):
        half = pub.buffers()
        half["layer0.w"].fill(2)
        raise RuntimeError("the trainer fails mid-fill")
    assert probe.held().result(60) == [1, [1.0]]
    buffers = pub.buffers()  # the same memory again, filled anew
    assert np.shares_memory(buffers["layer0.w"], half["layer0.w"])
    fill(buffers, 3)
    assert pub.publish(buffers) == 2
    assert probe.digests(0).result(60)[0] == 2 and probe.held().result(60) == [2, [3.0]]


def test_a_rollout_that_joins_late_fetches_the_version_in_the_buffers(cluster, child_process):
    pub = iris.weights.Publisher("policy")
    for version in (1, 2):
        buffers = pub.buffers(LAYOUT if version == 1 else None)
        fill(buffers, version)
        pub.publish(buffers)
    copied = iris.current().node._pool.copied_bytes
    (probe,) = start_rollouts(child_process, cluster, 1)
    assert probe.digests(0).result(60)[0] == 2 and probe.held().result(60) == [2, [2.0]]
    assert iris.current().node._pool.copied_bytes == copied  # the fetch's reply: no copy


CHAIN_TRAINER = """
import threading
import iris

ctx = iris.connect()
pub = iris.weights.Publisher("policy")

@iris.actor
class Control:
    def publish(self, value):
        buffers = pub.buffers({"w": ((1 << 20,), "float32"), "i": ((5000,), "int32")})
        for array in buffers.values():
            array.fill(value)
        return [pub.publish(buffers), pub.last_failures]

Control.serve("control")
print("READY", flush=True)
threading.Event().wait()
"""


def test_buffers_go_down_the_chain_to_rollouts_without_shared_memory(cluster, child_process,
                                                                    wait_until):
    off = {"IRIS_ADDRESS": cluster.address, "IRIS_SHM_MIN_BYTES": "0"}
    child_process(CHAIN_TRAINER, off).wait_ready()
    control = iris.resolve("control", timeout=60)
    probes = []
    for i in range(2):
        child_process(ROLLOUT, {**off, "PROBE": f"probe{i}"}).wait_ready()
        probes.append(iris.resolve(f"probe{i}", timeout=60))
    wait_for_subscribers(2, wait_until)
    for version in (1, 2, 3):
        assert control.publish(version).result(120) == [version, {}]
        assert [p.held().result(60) for p in probes] == [[version, [float(version)]]] * 2


TRAINER = """
import os, threading
import iris

ctx = iris.connect()
pub = iris.weights.Publisher("policy")
layout = {"w": ((1 << 20,), "float32"), "b": ((1 << 18,), "float32")}
buffers = pub.buffers(layout)
for array in buffers.values():
    array.fill(1.0)
pub.publish(buffers)

@iris.actor
class Control:
    def die_mid_fill(self):
        half = pub.buffers()
        half["w"].fill(2.0)
        os.kill(os.getpid(), 9)

Control.serve("control")
print("READY", flush=True)
threading.Event().wait()
"""


def test_a_publisher_killed_mid_fill_publishes_no_half_version(cluster, child_process):
    trainer = child_process(TRAINER, {"IRIS_ADDRESS": cluster.address})
    trainer.wait_ready()
    sub = iris.weights.Subscriber("policy")
    version, weights = sub.get(0, timeout=60)
    assert version == 1
    with pytest.raises(iris.PeerUnavailableError):
        iris.resolve("control").die_mid_fill().result(60)
    trainer.proc.wait(60)
    assert trainer.proc.returncode == -signal.SIGKILL
    assert sub.version == 1
    assert {float(x) for v in weights.values() for x in np.unique(v)} == {1.0}
    assert os.getpid()  # the mapping outlives its sender: still readable above


@pytest.mark.parametrize("layout, match", [
    ({}, "non-empty dict"), ([1], "non-empty dict"), ({"w": ((2, -1), "float32")}, "w"),
    ({"w": ((2,), object)}, "w"), ({"w": "float32"}, "w"), ({3: ((2,), "f4")}, "names")])
def test_a_bad_layout_is_refused_naming_it(cluster, layout, match):
    pub = iris.weights.Publisher("policy")
    with pytest.raises(ValueError, match=match):
        pub.buffers(layout)
    with pytest.raises(ValueError, match="first time"):
        pub.buffers()
