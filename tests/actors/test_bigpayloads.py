"""Cluster tier: big payloads between processes — arrays keep dtype and shape, arrive read-only
over the received memory, travel through shared memory on one host, and leak nothing when
either side is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import threading

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
    def open_segments(self):
        found = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                if "iris-shm" in os.readlink(f"/proc/self/fd/{fd}"):
                    found.add(os.stat(f"/proc/self/fd/{fd}").st_ino)
            except OSError:
                pass
        return len(found)

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


def memfds(pid: int | str = "self") -> set[int]:
    """The shared-memory segments (memfds made by Iris) a process holds open, by inode."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "iris-shm" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                found.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
        except OSError:
            continue
    return found


# Named in /dev/shm by other tests running beside these ones, never by Iris: POSIX
# semaphores (multiprocessing's locks, the in-process backend's pools) and Chromium's.
_NOT_IRIS = ("sem.", ".org.chromium.")


def shm_names() -> set[str]:
    """What is named under /dev/shm (Iris names nothing there: its segments are memfds),
    less what other tests' processes name there meanwhile."""
    names = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    return {n for n in names if not n.startswith(_NOT_IRIS)}


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


def test_receiver_keeps_its_data_while_the_sender_reuses_released_segments(
        cluster, child_process):
    held_before = memfds()  # segments an earlier test's shared fixture still holds
    _, ref = serve(child_process, cluster, "store")
    assert ref.keep(np.full(2 * MiB, 7, dtype=np.int32)).result(60) == 7
    for i in range(12):  # same size: released segments are refilled, the kept one is not
        assert ref.echo(np.full(2 * MiB, i, dtype=np.int32)).result(60)[-1] == i
    assert ref.kept_last().result(60) == 7
    assert len(memfds() - held_before) <= 3  # a few segments reused, not one per call
    assert ref.open_segments().result(60) <= 3


def test_receiver_killed_mid_call_leaves_no_segment_on_either_side(cluster, child_process,
                                                                   wait_until):
    before = shm_names()
    child, ref = serve(child_process, cluster, "victim")
    pool = iris.current().node._pool
    fut = ref.block(np.ones(8 * MiB, dtype=np.uint8))
    wait_until(lambda: pool.busy() == 1 and memfds(), 30, "the call to be in flight")
    os.kill(child.proc.pid, signal.SIGKILL)
    with pytest.raises(iris.PeerUnavailableError):
        fut.result(60)
    wait_until(lambda: pool.busy() == 0, 30, "the caller to stop holding its segment")
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
    before, held_before = shm_names(), memfds()  # (an earlier test's fixture may hold some)
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
    assert not memfds() - held_before  # we hold mappings only, never the dead sender's fds
    assert shm_names() <= before
    assert sink.name == "/sink"


ROLLOUT = """
import os, threading
import numpy as np
import iris

ctx = iris.connect()
sub = iris.weights.Subscriber("policy")

@iris.actor
class Probe:
    def get(self, max_stale):
        version, weights = sub.get(max_stale=max_stale, timeout=120)
        return [version, float(weights["w"][0]), weights["w"].shape[0]]
    def via(self):
        return sub._box.via
    def checksum(self):
        return [sub.version, float(sub._box.weights["w"].astype(np.float64).sum())]
    def die_at_chunk(self, k):
        # SIGKILL this process when chunk k of a chained push is in place (mid-transfer)
        import iris.actors.relay
        opened = iris.actors.relay.Incoming.opened
        def opened_or_die(incoming, i):
            if i == k:
                os.kill(os.getpid(), 9)
            return opened(incoming, i)
        iris.actors.relay.Incoming.opened = opened_or_die
    def segments(self):
        with open("/proc/self/maps") as maps:
            return sorted({line.split()[4] for line in maps if "memfd:iris-shm" in line})

Probe.serve(os.environ["PROBE"])
print("READY", flush=True)
threading.Event().wait()
"""


def start_rollouts(child_process, cluster, count):
    probes = []
    for i in range(count):
        child = child_process(ROLLOUT, {"IRIS_ADDRESS": cluster.address, "PROBE": f"probe{i}"})
        child.wait_ready()
        probes.append(iris.resolve(f"probe{i}", timeout=60))
    return probes


def weights_of(version: int) -> dict:
    return {"w": np.full(MiB, float(version), dtype=np.float32)}


def test_publish_reaches_every_rollout_through_one_shared_segment(cluster, child_process):
    pub = iris.weights.Publisher("policy")
    probes = start_rollouts(child_process, cluster, 3)
    iris.resolve_all("policy.rollouts", timeout=60)
    assert pub.publish(weights_of(1)) == 1 and pub.last_failures == {}
    assert [p.get(0).result(60) for p in probes] == [[1, 1.0, MiB]] * 3
    inodes = [p.segments().result(60) for p in probes]
    assert len(inodes[0]) == 1 and inodes == [inodes[0]] * 3  # one copy, mapped by all three


def test_rollout_asking_newest_waits_for_the_next_version_without_polling(cluster,
                                                                         child_process):
    pub = iris.weights.Publisher("policy")
    (probe,) = start_rollouts(child_process, cluster, 1)
    waiting = probe.get(0)  # nothing published yet: waits for version 1
    pub.publish(weights_of(1))
    assert waiting.result(60) == [1, 1.0, MiB]
    pub.publish(weights_of(2), wait=False)
    pub.publish(weights_of(3))
    assert probe.get(1).result(60)[0] >= 2
    assert probe.get(0).result(60)[0] == 3


def test_rollout_that_joins_late_fetches_the_newest_version(cluster, child_process):
    pub = iris.weights.Publisher("policy")
    pub.publish(weights_of(1))
    pub.publish(weights_of(2))
    (probe,) = start_rollouts(child_process, cluster, 1)
    assert probe.get(0).result(60) == [2, 2.0, MiB]


def test_dead_rollout_fails_only_its_own_delivery(cluster, child_process, wait_until):
    pub = iris.weights.Publisher("policy")
    probes = start_rollouts(child_process, cluster, 2)
    victim = child_process(ROLLOUT, {"IRIS_ADDRESS": cluster.address, "PROBE": "victim"})
    victim.wait_ready()
    wait_until(lambda: len(iris.resolve_all("policy.rollouts")) == 3, 60, "3 subscribers")
    victim.kill()
    pub.publish(weights_of(1))
    assert len(pub.last_failures) == 1
    assert [p.get(0).result(60) for p in probes] == [[1, 1.0, MiB]] * 2


TRAINER = """
import threading
import numpy as np
import iris

ctx = iris.connect()
pub = iris.weights.Publisher("policy")
pub.publish({"w": np.full(1 << 20, 1.0, dtype=np.float32)})

@iris.actor
class Control:
    def publish_next(self):
        return pub.publish({"w": np.full(1 << 20, 2.0, dtype=np.float32)}, wait=False)

Control.serve("control")
print("READY", flush=True)
threading.Event().wait()
"""


def test_publisher_killed_mid_push_gives_the_waiting_rollout_an_error_not_a_hang(
        cluster, child_process):
    trainer = child_process(TRAINER, {"IRIS_ADDRESS": cluster.address})
    trainer.wait_ready()
    sub = iris.weights.Subscriber("policy")
    assert sub.get(0, timeout=60)[0] == 1
    hosted = iris.current().node._actors["/policy.rollouts"].instance
    entered, release = threading.Event(), threading.Event()
    receive = hosted.receive

    def stuck_receive(*args):  # the push of version 2 stays on its way in
        entered.set()
        release.wait(120)
        return receive(*args)

    hosted.receive = stuck_receive
    outcome: list = []
    try:
        assert iris.resolve("control").publish_next().result(60) == 2
        assert entered.wait(60)
        waiter = threading.Thread(target=lambda: outcome.append(_get_outcome(sub)))
        waiter.start()
        os.kill(trainer.proc.pid, signal.SIGKILL)
        waiter.join(90)
        assert not waiter.is_alive(), "get() hung after the publisher died"
    finally:
        release.set()
    assert isinstance(outcome[0], iris.PeerUnavailableError), outcome


def _get_outcome(sub):
    try:
        return sub.get(0, timeout=60)
    except Exception as exc:
        return exc


REMOTE_TRAINER = """
import os, threading
import numpy as np
import iris
import iris.actors.bulk

ctx = iris.connect()
pub = iris.weights.Publisher("policy", chunk_bytes=int(os.environ["CHUNK_BYTES"]))

@iris.actor
class Control:
    def publish(self, version):
        pub.publish(weights(version))
        return sorted(pub.last_failures)

    def publish_and_die_at_chunk(self, version, k):
        # Publish, and SIGKILL this process as it seals chunk k (mid-chain).
        plain_chunk = iris.actors.bulk.Layout.plain_chunk
        def plain_chunk_or_die(layout, i):
            if i == k:
                os.kill(os.getpid(), 9)
            return plain_chunk(layout, i)
        iris.actors.bulk.Layout.plain_chunk = plain_chunk_or_die
        pub.publish(weights(version))

def weights(version):  # 4 MiB, every element different: a misplaced chunk shows in the sum
    return {"w": np.arange(1 << 20, dtype=np.float32) + float(version)}

Control.serve("control")
print("READY", flush=True)
threading.Event().wait()
"""
CHUNK_BYTES = 64 * 1024  # 64 chunks of the 4 MiB payload


def expected_sum(version: int) -> float:
    return float((np.arange(MiB, dtype=np.float32) + float(version)).astype(np.float64).sum())


def start_remote_trainer(child_process, cluster):
    """A publisher that treats every subscriber as on another host (shared memory off)."""
    trainer = child_process(REMOTE_TRAINER, {"IRIS_ADDRESS": cluster.address,
                                             "IRIS_SHM_MIN_BYTES": "0",
                                             "CHUNK_BYTES": str(CHUNK_BYTES)})
    trainer.wait_ready()
    return iris.resolve("control", timeout=60)


def start_socket_rollouts(child_process, cluster, count, wait_until):
    """`count` rollouts with shared memory off (every hop on the socket path), in the
    publisher's chain order: [(address, probe, child)]."""
    children = [child_process(ROLLOUT, {"IRIS_ADDRESS": cluster.address, "PROBE": f"p{i}",
                                        "IRIS_SHM_MIN_BYTES": "0"}) for i in range(count)]
    for child in children:
        child.wait_ready()
    wait_until(lambda: len(iris.resolve_all("policy.rollouts")) == count, 60,
               f"{count} subscribers")
    by_address = {iris.resolve(f"p{i}").address: (iris.resolve(f"p{i}"), children[i])
                  for i in range(count)}
    return [(ref.address, *by_address[ref.address])
            for ref in iris.resolve_all("policy.rollouts")]


def test_publish_to_other_hosts_goes_down_a_chain_in_chunks(cluster, child_process,
                                                            wait_until):
    control = start_remote_trainer(child_process, cluster)
    chain = start_socket_rollouts(child_process, cluster, 4, wait_until)
    assert control.publish(1).result(120) == []
    for _, probe, _ in chain:  # held from the push (no fetch), every chunk in its place
        assert probe.checksum().result(60) == [1, expected_sum(1)]
    sources = [probe.via().result(60) for _, probe, _ in chain]
    # One stream from the trainer; each of the others from the one before it.
    assert sources == [control.address] + [address for address, _, _ in chain[:-1]]
    assert control.publish(2).result(120) == []  # the next version the same way
    assert [p.checksum().result(60) for _, p, _ in chain] == [[2, expected_sum(2)]] * 4


def test_middle_receiver_killed_mid_transfer_fails_only_itself(cluster, child_process,
                                                               wait_until):
    control = start_remote_trainer(child_process, cluster)
    chain = start_socket_rollouts(child_process, cluster, 4, wait_until)
    victim, victim_probe, victim_child = chain[1]
    victim_probe.die_at_chunk(5).result(60)  # kill -9 of itself, 5 chunks in
    assert control.publish(1).result(120) == [victim]
    assert victim_child.proc.wait(30) == -signal.SIGKILL
    alive = [c for c in chain if c[0] != victim]
    for _, probe, _ in alive:  # from the push, not a fetch: re-attached below the victim
        assert probe.checksum().result(60) == [1, expected_sum(1)]
    assert alive[1][1].via().result(60) == chain[0][0]  # its parent's parent took it on
    # Until its registration lapses the dead one is still listed: it fails alone again.
    assert control.publish(2).result(120) in ([], [victim])
    assert [p.checksum().result(60) for _, p, _ in alive] == [[2, expected_sum(2)]] * 3


def test_group_broadcast_of_big_arrays_is_copied_once_for_every_member_on_the_host(
        cluster, child_process, wait_until):
    held_before = memfds()  # segments an earlier test's shared fixture still holds
    for _ in range(3):
        child_process(SERVE, {"IRIS_ADDRESS": cluster.address, "SVC_NAME": "replica"}
                      ).wait_ready()
    wait_until(lambda: len(iris.resolve_all("replica")) == 3, 60, "3 replicas")
    group = iris.resolve_all("replica")
    weights = {"w": np.arange(2 * MiB, dtype=np.float32)}
    futs = group.describe.broadcast(weights)
    assert len(futs) == 3
    for fut in futs:
        assert fut.result(60)["w"][:3] == ["float32", [2 * MiB], float(weights["w"].sum())]
    assert len(memfds() - held_before) == 1  # one segment for the three of them


def test_trainer_killed_mid_chain_gives_waiting_rollouts_an_error_not_a_hang(
        cluster, child_process, wait_until):
    control = start_remote_trainer(child_process, cluster)
    chain = start_socket_rollouts(child_process, cluster, 3, wait_until)
    waiting = [probe.get(0) for _, probe, _ in chain]  # nothing published: wait for v1
    with pytest.raises(iris.PeerUnavailableError):
        control.publish_and_die_at_chunk(1, 10).result(120)
    for fut in waiting:  # each rollout's get() fails (within peer liveness), none hangs
        with pytest.raises(iris.PeerUnavailableError):
            fut.result(120)


@pytest.mark.parametrize("kwargs", [{"size_hint": -1}, {"size_hint": 1.5},
                                    {"chunk_bytes": 0}, {"chunk_bytes": True}])
def test_publisher_refuses_a_bad_size_hint_or_chunk_size_naming_it(cluster, kwargs):
    (name,) = kwargs
    with pytest.raises(ValueError, match=name):
        iris.weights.Publisher("policy", **kwargs)
    assert iris.resolve_all("policy").refs == []  # nothing served


def test_shared_memory_is_shared_only_within_one_boot_and_pid_namespace():
    from iris.actors import shm_scope

    assert shm_scope.can_share(("boot-a", 4026531836), ("boot-a", 4026531836))
    assert not shm_scope.can_share(("boot-a", 4026531836), ("boot-a", 4026532999))  # container
    assert not shm_scope.can_share(("boot-a", 4026531836), ("boot-b", 4026531836))  # other host
    assert not shm_scope.can_share(("", 0), ("", 0))  # unknown is never "the same"


IN_OWN_PID_NAMESPACE = """
import os, sys
# unshare: a new PID namespace (this process's child is its pid 1), same network namespace,
# so loopback reaches it: a container with host networking.
os.execvp("unshare", ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                      os.environ["INNER"]])
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --pid needs root here")
def test_actor_in_another_pid_namespace_gets_and_returns_big_arrays_through_the_socket(
        cluster, child_process):
    child = child_process(IN_OWN_PID_NAMESPACE, {"IRIS_ADDRESS": cluster.address,
                                                 "SVC_NAME": "boxed", "INNER": SERVE})
    _, pid = child.wait_ready().split()
    assert pid == "1"  # really in a PID namespace of its own
    ref = iris.resolve("boxed", timeout=60)
    array = np.arange(2 * MiB, dtype=np.float32)
    for _ in range(2):  # the first refused shared memory and went again; the second knew
        back = ref.echo(array).result(60)
        assert back.dtype == np.float32 and np.array_equal(back, array)
        assert ref.backing(array).result(60) != "shared"
