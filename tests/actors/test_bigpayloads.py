"""Cluster tier: big payloads between processes — arrays keep dtype and shape, arrive read-only
over the received memory, travel through shared memory on one host, and leak nothing when
either side is killed with SIGKILL."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import iris

SERVE = """
import os, sys, threading
import numpy as np
import iris

@iris.actor
class Store:
    def __init__(self):
        self.kept = None
    def echo(self, x):
        return x
    def describe(self, weights):
        return {k: [str(v.dtype), list(v.shape), float(v.sum()), v.flags.writeable]
                for k, v in weights.items()}
    def mutate(self, array):
        array[0] = 42
    def backing(self, array):
        while isinstance(array, np.ndarray):
            array = array.base
        name = type(array.obj).__name__
        return "shared" if name.startswith("c_char_Array") else name
    def keep(self, array):
        self.kept = array
        return int(array[-1])
    def kept_last(self):
        return int(self.kept[-1])
    def block(self, array):
        threading.Event().wait(600)

ctx = iris.connect()
Store.serve(os.environ["SVC_NAME"])
print("READY", ctx.node.address, os.getpid(), flush=True)
threading.Event().wait()
"""

MiB = 1 << 20


def serve(child_process, cluster, name, **env):
    child = child_process(SERVE, {"IRIS_ADDRESS": cluster.address, "SVC_NAME": name, **env})
    child.wait_ready()
    return child, iris.resolve(name, timeout=60)


def memfds(pid: int | str = "self") -> list[str]:
    """This process's open shared-memory segments (memfds made by Iris)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "iris-shm" in target:
            found.append(target)
    return found


def shm_names() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def test_dict_of_named_arrays_round_trips_between_processes_with_dtype_and_shape(
        cluster, child_process):
    _, ref = serve(child_process, cluster, "store")
    weights = {"embed": np.arange(2 * MiB, dtype=np.float32).reshape(1024, 2048),
               "bias": np.full(5, 0.5, dtype=np.float16),
               "steps": np.arange(300_000, dtype=np.int64)}
    described = ref.describe(weights).result(60)
    assert described["embed"][:2] == ["float32", [1024, 2048]]
    assert described["bias"][:3] == ["float16", [5], 2.5]
    assert described["steps"][2] == float(weights["steps"].sum())
    assert not any(d[3] for d in described.values())  # the receiver holds read-only views
    back = ref.echo(weights).result(60)
    for name, array in weights.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        assert np.array_equal(back[name], array)


def test_receiver_mutating_a_received_array_gets_a_read_only_error(cluster, child_process):
    _, ref = serve(child_process, cluster, "store")
    with pytest.raises(ValueError, match="read-only") as info:
        ref.mutate(np.zeros(MiB)).result(60)
    assert "in mutate" in info.value.remote_traceback


def backing_of(array) -> str:
    """"shared" for a view of a shared-memory mapping, "Frame" for a received ZeroMQ frame."""
    while isinstance(array, np.ndarray):
        array = array.base
    name = type(array.obj).__name__
    return "shared" if name.startswith("c_char_Array") else name


def test_same_host_big_array_travels_through_shared_memory_both_ways(cluster, child_process):
    _, ref = serve(child_process, cluster, "store")
    assert ref.backing(np.ones(4 * MiB, dtype=np.uint8)).result(60) == "shared"
    echoed = ref.echo(np.arange(MiB, dtype=np.float64)).result(60)
    assert backing_of(echoed) == "shared" and echoed[-1] == MiB - 1


def test_shared_memory_turned_off_sends_big_arrays_through_the_socket(cluster, child_process):
    _, ref = serve(child_process, cluster, "store", IRIS_SHM_MIN_BYTES="0")
    echoed = ref.echo(np.arange(MiB, dtype=np.float64)).result(60)  # its reply: no segment
    assert backing_of(echoed) == "Frame" and echoed[-1] == MiB - 1


def test_sender_releases_its_segment_once_the_call_is_answered(cluster, child_process,
                                                               wait_until):
    _, ref = serve(child_process, cluster, "store")
    assert ref.keep(np.arange(2 * MiB, dtype=np.int32)).result(60) == 2 * MiB - 1
    wait_until(lambda: not memfds(), 30, "the caller to close its segment")
    # The receiver still reads what it kept: its mapping outlives the sender's fd.
    assert ref.kept_last().result(60) == 2 * MiB - 1


def test_receiver_killed_mid_call_leaves_no_segment_on_either_side(cluster, child_process,
                                                                   wait_until):
    before = shm_names()
    child, ref = serve(child_process, cluster, "victim")
    fut = ref.block(np.ones(8 * MiB, dtype=np.uint8))
    wait_until(lambda: memfds(child.proc.pid) == [] and memfds(), 30,
               "the call to be in flight")
    os.kill(child.proc.pid, signal.SIGKILL)
    with pytest.raises(iris.PeerUnavailableError):
        fut.result(60)
    wait_until(lambda: not memfds(), 30, "the caller to close its segment")
    assert shm_names() <= before


SENDER = """
import os, threading
import numpy as np
import iris

ctx = iris.connect()
ref = iris.resolve("sink", timeout=60)
futs = [ref.hold(np.full(4 << 20, i, dtype=np.uint8)) for i in range(3)]
print("READY", flush=True)
threading.Event().wait()
"""


@iris.actor
class Sink:
    def __init__(self):
        self.held = []

    def hold(self, array):
        self.held.append(array)
        return len(self.held)


def test_sender_killed_after_sending_leaves_no_segment_and_receiver_keeps_its_data(
        cluster, child_process, wait_until):
    before = shm_names()
    Sink.serve("sink")
    sink = iris.resolve("sink")
    child = child_process(SENDER, {"IRIS_ADDRESS": cluster.address})
    child.wait_ready()
    hosted = iris.current().node._actors["/sink"].instance
    wait_until(lambda: len(hosted.held) == 3, 60, "the three arrays to arrive")
    os.kill(child.proc.pid, signal.SIGKILL)
    child.proc.wait(30)
    assert sorted(int(a[0]) for a in hosted.held) == [0, 1, 2]  # mapped pages outlive it
    assert all(a.nbytes == 4 * MiB for a in hosted.held)
    assert not memfds()  # we hold mappings only, never the dead sender's fds
    assert shm_names() <= before
    assert sink.name == "/sink"
