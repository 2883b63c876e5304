"""Multi-slice TPU gangs and GPU gangs (issue 20): each rule from the kernel's side.

Ledger: N whole slices reserved in one round or none; a zone constraint keeps them in one
zone; a GPU gang's hosts come from one pool. Scheduler: the pending reason says how far
the best region is. Job kernel: losing one slice's host requeues the whole multi-slice
gang. Environment: each task's slice and torch coordinates. Worker: GPU indices disjoint.
"""

from __future__ import annotations

import pytest

from iris.base.errors import InvalidRequestError
from iris.base.resources import Resources
from iris.controller.gangs.ledger import ReservationLedger, SliceSpec
from iris.controller.gangs.protocol import Refused, Reserved
from iris.controller.jobs import events as ev
from iris.controller.jobs.env import task_environment
from iris.controller.jobs.model import TaskState
from iris.controller.scheduling.constraints import parse_constraints
from iris.controller.scheduling.model import Band, GangShape, TaskDemand, gang_shape
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import schedule
from iris.wire.schema import decode, encode
from iris.worker.capacity import CapacityExceededError, CapacityLedger
from tests.controller.test_job_support import Harness, spec
from tests.controller.test_scheduler import tpu_slice

TWO_SLICES = GangShape("v5litepod-16", hosts=8, whole_slices=2)


def _tpu_ledger(zones: list[str]) -> ReservationLedger:
    return ReservationLedger("r1", [
        SliceSpec(f"s{i}", "v5litepod-16", tuple(f"s{i}-h{j}" for j in range(4)), {"zone": z})
        for i, z in enumerate(zones)])


# ---- resources: the request -----------------------------------------------------------

def test_resources_multi_slice_gang_is_every_host_of_every_slice():
    res = Resources(tpu="v5litepod-16", count=2)
    assert (res.gang_size, res.slices) == (8, 2)
    assert gang_shape(res, 8) == TWO_SLICES


@pytest.mark.parametrize("kwargs, field, text", [
    ({"tpu": "v5litepod-16", "count": 0}, "count", ">= 1"),
    ({"tpu": "v5litepod-16", "count": 257}, "count", "at most 256"),
    ({"tpu": "v5litepod-16", "hosts": 2}, "hosts", "only a GPU job"),
    ({"gpu": "H100", "count": 8, "hosts": 0}, "hosts", ">= 1"),
    ({"gpu": "H100", "count": 17}, "count", "at most 16"),
    ({"cpu": 2, "hosts": 3}, "hosts", "only a GPU job"),
])
def test_resources_gang_out_of_bounds_refused_naming_the_field(kwargs, field, text):
    with pytest.raises(InvalidRequestError, match=text) as err:
        Resources(**kwargs)
    assert err.value.field == field


def test_resources_gpu_gang_round_trips_through_storage():
    res = Resources(gpu="H100", count=8, hosts=4)
    assert Resources.from_dict(res.to_dict()) == res
    assert res.gang_size == 4
    assert gang_shape(res, 4) == GangShape("H100", 4, 0, (), one_pool=True)
    assert "hosts" not in Resources(gpu="H100", count=8).to_dict()


def test_gang_shape_one_pool_crosses_the_wire_and_old_peers_read_false():
    shape = GangShape("H100", 4, 0, (), one_pool=True)
    assert decode(GangShape, encode(shape)) == shape
    old = {k: v for k, v in encode(shape).items() if k != "one_pool"}
    assert decode(GangShape, old).one_pool is False


# ---- ledger: all slices or none ---------------------------------------------------------

def test_ledger_reserves_two_whole_slices_in_one_round():
    ledger = _tpu_ledger(["z0", "z0", "z0"])
    offer = ledger.reserve("g1", 1, TWO_SLICES, lease_s=10, now=0)
    assert isinstance(offer, Reserved) and len(offer.hosts) == 8
    assert {h.split("-")[0] for h in offer.hosts} == {"s0", "s1"}
    # hosts grouped slice by slice, each slice in host order: task i runs on hosts[i]
    assert list(offer.hosts[:4]) == [f"s0-h{j}" for j in range(4)]


def test_ledger_one_free_slice_of_two_refuses_and_holds_nothing():
    ledger = _tpu_ledger(["z0", "z0"])
    ledger.set_busy(["s1-h2"], True)  # one host of s1 runs other work: s1 is not whole
    refusal = ledger.reserve("g1", 1, TWO_SLICES, lease_s=10, now=0)
    assert isinstance(refusal, Refused) and refusal.code == "NO_CAPACITY"
    assert "2 free whole v5litepod-16 slice(s)" in refusal.reason
    assert all(ledger.holder(h) is None for h in ledger.hosts)
    ledger.set_busy(["s1-h2"], False)
    assert isinstance(ledger.reserve("g1", 2, TWO_SLICES, lease_s=10, now=1), Reserved)


def test_ledger_zone_constraint_keeps_all_slices_in_that_zone():
    ledger = _tpu_ledger(["z0", "z1", "z1"])
    in_z1 = GangShape("v5litepod-16", 8, 2, parse_constraints({"zone": "z1"}))
    offer = ledger.reserve("g1", 1, in_z1, lease_s=10, now=0)
    assert isinstance(offer, Reserved)
    assert {h.split("-")[0] for h in offer.hosts} == {"s1", "s2"}
    in_z0 = GangShape("v5litepod-16", 8, 2, parse_constraints({"zone": "z0"}))
    assert isinstance(ledger.reserve("g2", 1, in_z0, lease_s=10, now=0), Refused)


def test_ledger_gpu_gang_takes_hosts_of_one_pool_only():
    specs = [SliceSpec(f"a{i}", "H100", (f"a{i}",), {"zone": "z0", "pool": "a"})
             for i in range(2)]
    specs += [SliceSpec(f"b{i}", "H100", (f"b{i}",), {"zone": "z0", "pool": "b"})
              for i in range(3)]
    ledger = ReservationLedger("r1", specs)
    three = GangShape("H100", 3, 0, (), one_pool=True)
    offer = ledger.reserve("g1", 1, three, lease_s=10, now=0)
    assert isinstance(offer, Reserved) and sorted(offer.hosts) == ["b0", "b1", "b2"]
    # 2 pool-a hosts are free, and 4 hosts are free in the region, but not in one pool
    ledger.abort("g1", 1, now=1)
    refusal = ledger.reserve("g2", 1, GangShape("H100", 4, 0, (), one_pool=True), 10, now=1)
    assert isinstance(refusal, Refused) and "in one pool" in refusal.reason
    assert all(ledger.holder(h) is None for h in ledger.hosts)


# ---- scheduler: where, and why not ------------------------------------------------------

def _two_slice_tasks(job: str = "j1") -> list[TaskDemand]:
    res = Resources(cpu=8, tpu="v5litepod-16", count=2)
    return [TaskDemand(f"{job}-t{i}", job, "ann", Band.BATCH, res, (), f"{job}-g", 8)
            for i in range(8)]


def test_schedule_two_slice_gang_asks_one_region_with_two_free_slices():
    hosts = tpu_slice("a0", "r1") + tpu_slice("b0", "r2") + tpu_slice("b1", "r2")
    (ask,) = schedule(hosts, _two_slice_tasks()).gang_requests
    assert ask.regions == ("r2",) and ask.shape.whole_slices == 2
    assert sorted(ask.hosts) == sorted(h.host_id for h in hosts[4:])


def test_schedule_two_slice_gang_short_one_slice_says_what_is_missing():
    hosts = tpu_slice("a0", "r1") + tpu_slice("b0", "r2")
    plan = schedule(hosts, _two_slice_tasks())
    assert not plan.gang_requests and not plan.assignments
    reason = plan.reasons["j1-t0"]
    assert reason.code is ReasonCode.NO_CAPACITY
    assert reason.message == ("needs 2 whole v5litepod-16 slices in one region; "
                              "r2 has 1 free")


def test_schedule_gpu_gang_asks_for_hosts_of_one_pool():
    from iris.controller.scheduling.model import Demand, HostView
    hosts = [HostView(f"{p}{i}", "r1", "r1-a", Demand(32, 0, 8), slice_id=f"{p}{i}",
                      accelerator="H100", attributes={"pool": p})
             for p, n in (("a", 2), ("b", 3)) for i in range(n)]
    res = Resources(cpu=8, gpu="H100", count=8, hosts=3)
    tasks = [TaskDemand(f"t{i}", "j1", "ann", Band.BATCH, res, (), "j1-g", 3) for i in range(3)]
    (ask,) = schedule(hosts, tasks).gang_requests
    assert sorted(ask.hosts) == ["b0", "b1", "b2"] and ask.shape.one_pool
    four = [TaskDemand(f"u{i}", "j2", "ann", Band.BATCH, Resources(cpu=8, gpu="H100", count=8,
                                                                     hosts=4), (), "j2-g", 4)
            for i in range(4)]
    plan = schedule(hosts, four)
    assert not plan.gang_requests
    assert "in one pool" in plan.reasons["u0"].message


# ---- job kernel: one slice lost, the whole gang again -----------------------------------

def test_losing_one_host_of_one_slice_requeues_every_task_of_the_multi_slice_gang():
    h = Harness()
    job = h.submit(spec("ms", resources={"tpu": "v5litepod-16", "count": 2}))
    assert len(h.state.job_tasks(job)) == 8
    attempts = [f"a{i}" for i in range(8)]
    h.send(ev.Assign(h.eid(), tuple(ev.Placement(job, i, f"w{i}", attempts[i])
                                    for i in range(8))))
    for a in attempts:
        h.send(ev.AttemptRunning(h.eid(), a))
    effects = h.send(ev.WorkerLost(h.eid(), "w5"))  # host 1 of slice 1
    stopped = {s.attempt_id for s in effects if isinstance(s, ev.StopAttempt)}
    assert stopped == set(attempts) - {"a5"}  # a5's worker is gone; its siblings are told
    assert [h.task_state(job, i) for i in range(8)] == [TaskState.PENDING] * 8


# ---- environment: where each task stands ------------------------------------------------

def test_env_two_slice_gang_names_slice_worker_and_megascale_coordinator():
    s = spec("ms", resources={"tpu": "v5litepod-16", "count": 2})
    hosts = [f"10.0.{i // 4}.{i % 4}" for i in range(8)]
    envs = [task_environment(s, i, f"a{i}", controller_address="tcp://c:1",
                             coordinator_address="10.0.0.0:20001", gang_hosts=hosts)
            for i in range(8)]
    assert [e["MEGASCALE_SLICE_ID"] for e in envs] == ["0"] * 4 + ["1"] * 4
    assert [e["TPU_WORKER_ID"] for e in envs] == ["0", "1", "2", "3"] * 2
    assert [e["JAX_PROCESS_ID"] for e in envs] == [str(i) for i in range(8)]
    assert {e["MEGASCALE_NUM_SLICES"] for e in envs} == {"2"}
    assert {e["JAX_NUM_PROCESSES"] for e in envs} == {"8"}
    assert {e["MEGASCALE_COORDINATOR_ADDRESS"] for e in envs} == {"10.0.0.0:20002"}
    assert envs[5]["TPU_WORKER_HOSTNAMES"] == "10.0.1.0,10.0.1.1,10.0.1.2,10.0.1.3"
    assert "MASTER_ADDR" not in envs[0]


def test_env_one_slice_gang_has_worker_ids_but_no_megascale():
    s = spec("one", resources={"tpu": "v5litepod-16"})
    env = task_environment(s, 2, "a2", controller_address="tcp://c:1",
                           coordinator_address="h0:20001", gang_hosts=["h0", "h1", "h2", "h3"])
    assert env["TPU_WORKER_ID"] == "2" and env["TPU_WORKER_HOSTNAMES"] == "h0,h1,h2,h3"
    assert not any(k.startswith("MEGASCALE") for k in env)


def test_env_gpu_gang_gives_torch_rank_world_size_and_master():
    s = spec("gpu", resources={"gpu": "H100", "count": 8, "hosts": 4}, replicas=2)
    envs = [task_environment(s, i, f"a{i}", controller_address="tcp://c:1",
                             coordinator_address=f"g{i // 4}:30000") for i in range(8)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"] * 2
    assert {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert [e["MASTER_ADDR"] for e in envs] == ["g0"] * 4 + ["g1"] * 4
    assert {e["MASTER_PORT"] for e in envs} == {"30001"}
    assert {e["LOCAL_RANK"] for e in envs} == {"0"}
    assert envs[3]["JAX_PROCESS_ID"] == "3" and envs[3]["JAX_NUM_PROCESSES"] == "4"


# ---- worker: GPU indices ---------------------------------------------------------------

def test_worker_gives_each_attempt_disjoint_gpu_indices_and_reuses_freed_ones():
    ledger = CapacityLedger(Resources(cpu=64, gpu="H100", count=8))
    for key, n in (("a", 2), ("b", 4), ("c", 2)):
        ledger.admit(key, Resources(cpu=1, gpu="H100", count=n))
    held = [ledger.devices(k) for k in "abc"]
    assert held == [(0, 1), (2, 3, 4, 5), (6, 7)]
    with pytest.raises(CapacityExceededError, match="gpus"):
        ledger.admit("d", Resources(cpu=1, gpu="H100", count=1))
    assert ledger.devices("d") == ()
    ledger.release("b")
    ledger.admit("e", Resources(cpu=1, gpu="H100", count=3))
    assert ledger.devices("e") == (2, 3, 4)


def test_worker_adopted_attempt_keeps_its_gpus_and_new_ones_avoid_them():
    ledger = CapacityLedger(Resources(cpu=64, gpu="H100", count=4))
    ledger.admit("old", Resources(cpu=1, gpu="H100", count=2), devices=(2, 3))
    ledger.admit("new", Resources(cpu=1, gpu="H100", count=2))
    assert ledger.devices("old") == (2, 3) and ledger.devices("new") == (0, 1)


def test_registered_gpu_worker_is_a_gpu_host_for_plain_and_gang_tasks():
    from iris.controller.jobs.state import KernelState
    from iris.controller.scheduler_view import host_views
    from iris.controller.workers import WorkerInfo

    gpu = WorkerInfo("g1", "tcp://10.0.0.5:1", "r1", {"accelerator_type": "H100",
                                                        "accelerator_count": "8"},
                     32.0, 64 * 10**9, 8, 0.0, 0.0)
    tpu = WorkerInfo("t1", "tcp://10.0.0.6:1", "r1", {"accelerator_type": "v5litepod-16",
                                                        "slice_id": "s1"},
                     32.0, 64 * 10**9, 4, 0.0, 0.0)
    views = {v.host_id: v for v in host_views(KernelState(), [gpu, tpu])}
    assert views["g1"].accelerator_variant is None  # not a TPU family called "H100"
    assert views["t1"].accelerator_variant == "v5litepod"
    plain = TaskDemand("p0", "j1", "ann", Band.BATCH, Resources(cpu=1, gpu="H100", count=2))
    assert [(a.task_id, a.host_id) for a in schedule([views["g1"]], [plain]).assignments] \
        == [("p0", "g1")]
