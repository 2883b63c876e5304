"""The controller's gangs object: rounds, held hosts, checks before assigning, releases when a
gang ends (requests to the regions through its coordinator); and the inventory each region's
ledger is sent (RegionPushes). Pure."""

from __future__ import annotations

from iris.controller.gangs.inventory import region_inventory
from iris.controller.gangs.ledger import ReservationLedger, SliceSpec
from iris.controller.gangs.protocol import Committed, Refused, Reserved
from iris.controller.gangs.tracking import CoordinatorConfig, GangTracker
from iris.controller.jobs import events as ev
from iris.controller.region_pushes import RegionPushes, SyncRegion
from iris.controller.scheduling.constraints import parse_constraints
from iris.controller.scheduling.gang_placement import GangRequest
from iris.controller.scheduling.model import Band, GangShape
from iris.controller.workers import WorkerInfo
from tests.controller.test_job_support import Harness, spec

SHAPE = GangShape("v5litepod-16", hosts=4, whole_slices=1)
TPU = {"accelerator_type": "v5litepod-16", "accelerator_count": "4", "slice_id": "s1",
       "zone": "r1-a"}


def _worker(wid: str, region: str = "r1", **attrs: str) -> WorkerInfo:
    return WorkerInfo(wid, f"tcp://127.0.0.1:{len(wid)}", region, {**TPU, **attrs}, 8.0,
                      2**34, 4, 0.0, 0.0)


HOSTS = [f"s1-h{i}" for i in (0, 1, 2, 10)]  # h10 sorts after h2: index order, not text
WORKERS = {h: _worker(h) for h in HOSTS}


def _gang_job(h: Harness) -> str:
    return h.submit(spec("gang", resources={"tpu": "v5litepod-16", "cpu": 1}))


def _request(job_id: str, hosts=HOSTS) -> GangRequest:
    return GangRequest(f"{job_id}#g0", job_id, Band.BATCH,
                       tuple(f"{job_id}[{i}]" for i in range(4)), SHAPE, ("r1", "r2"),
                       tuple(hosts))


def _frames(tracker: GangTracker) -> dict[str, list[tuple[str, str]]]:
    """What the gangs object sends each region now: (message type, round key) in order."""
    return {s.region: [(type(m).__name__, m.gang_id) for m in s.requests]
            for s in tracker.take_sends(0.0)}


def _aborted(rnd) -> dict[str, list[tuple[str, str]]]:
    """A round given up while its regions were still asked: both are told to let go."""
    return {r: [("AbortRequest", rnd.key)] for r in ("r1", "r2")}


def _committing(tracker: GangTracker, rnd, hosts=HOSTS) -> None:
    """r1 offers `hosts`, r2 refuses: the round commits in r1."""
    tracker.take_sends(0.0)
    tracker.replied("r1", [Reserved("r1", rnd.key, 1, "tok", tuple(hosts), 10)], 0.0)
    tracker.replied("r2", [Refused("r2", rnd.key, 1, "NO_CAPACITY", "full")], 0.0)
    tracker.take_sends(0.0)


def _placed(tracker: GangTracker, h: Harness, rnd, hosts=HOSTS):
    """The round placed in r1 on `hosts` and settled: its placements, and why not."""
    _committing(tracker, rnd, hosts)
    tracker.replied("r1", [Committed("r1", rnd.key, 1, "tok", tuple(hosts))], 0.0)
    assigns, reasons = tracker.settle(h.state, WORKERS, {}, 0.0)
    return [p for a in assigns for p in a.placements], reasons.get(rnd.job_id)


def test_tracker_request_holds_the_set_aside_hosts_until_the_round_settles():
    h, tracker = Harness(), GangTracker()
    job = _gang_job(h)
    rnd = tracker.request(_request(job))
    assert _frames(tracker) == {r: [("ReserveRequest", rnd.key)] for r in ("r1", "r2")}
    assert tracker.held_hosts() == set(HOSTS)
    placements, problem = _placed(tracker, h, rnd)
    assert problem is None and tracker.held_hosts() == set()
    assert [(p.task_index, p.worker_id) for p in placements] == list(enumerate(HOSTS))
    assert tracker.placed == [rnd]


def test_tracker_stale_round_is_released_not_assigned():
    h, tracker = Harness(), GangTracker()
    job = _gang_job(h)
    rnd = tracker.request(_request(job))
    _committing(tracker, rnd)
    tracker.release(rnd.key)  # the gang ended while its commit was travelling
    assert _frames(tracker) == {"r1": [("ReleaseRequest", rnd.key)]}
    tracker.replied("r1", [Committed("r1", rnd.key, 1, "tok", tuple(HOSTS))], 0.0)
    assert tracker.settle(h.state, WORKERS, {}, 0.0) is None and tracker.placed == []


def test_tracker_gang_asked_again_lets_go_of_its_previous_round():
    h, tracker = Harness(), GangTracker()
    job = _gang_job(h)
    gone = tracker.request(_request(job))
    rnd = tracker.request(_request(job))  # asked again: the first round is nobody's now
    assert _frames(tracker) == {r: [("ReserveRequest", gone.key), ("AbortRequest", gone.key),
                                    ("ReserveRequest", rnd.key)] for r in ("r1", "r2")}
    tracker.replied("r2", [Reserved("r2", gone.key, 1, "t", ("x-h0",), 10)], 0.0)
    assert _frames(tracker) == {"r2": [("AbortRequest", gone.key)]}  # a late offer: let go
    placements, problem = _placed(tracker, h, rnd)
    assert problem is None and len(placements) == 4 and tracker.reserving == {}


def test_tracker_offer_on_a_host_that_filled_meanwhile_is_released_with_a_reason():
    h, tracker = Harness(), GangTracker()
    job = _gang_job(h)
    other = h.submit(spec("single", resources={"cpu": 8}))
    h.assign(other, 0, worker="s1-h1")  # the region's view lagged: h1 is taken
    rnd = tracker.request(_request(job))
    placements, problem = _placed(tracker, h, rnd)
    assert placements == [] and "s1-h1 is busy" in problem["message"]
    assert _frames(tracker) == {"r1": [("ReleaseRequest", rnd.key)]}


def test_tracker_refused_gang_waits_before_being_asked_again_and_says_why():
    h = Harness()
    tracker = GangTracker(CoordinatorConfig(max_attempts=1, retry_after_s=5.0))
    job = _gang_job(h)
    rnd = tracker.request(_request(job))
    tracker.take_sends(100.0)
    for region in ("r1", "r2"):
        tracker.replied(region, [Refused(region, rnd.key, 1, "NO_CAPACITY", "no free slice")],
                        100.0)
    assert tracker.settle(h.state, WORKERS, {}, 100.0) == ([], {})
    reason = tracker.cooling_reasons(now=101.0)[f"{job}#g0"]
    assert reason["code"] == "NO_CAPACITY" and "r2: NO_CAPACITY: no free slice" in \
        reason["message"]
    assert tracker.cooling_reasons(now=105.0) == {} and not tracker.cooled(105.0)


def test_tracker_releases_a_round_once_its_gang_no_longer_runs_there():
    h, tracker = Harness(), GangTracker()
    job = _gang_job(h)
    rnd = tracker.request(_request(job))
    placements, _ = _placed(tracker, h, rnd)
    h.send(ev.Assign(h.eid(), tuple(placements)))
    tracker.release_ended(h.state)
    assert _frames(tracker) == {}  # running: the hold stays
    for p in placements:
        h.send(ev.AttemptRunning(h.eid(), p.attempt_id))
        h.exit(p.attempt_id, 0)
    tracker.release_ended(h.state)
    assert _frames(tracker) == {"r1": [("ReleaseRequest", rnd.key)]} and tracker.placed == []


def test_region_pushes_sync_a_region_only_when_its_inventory_changed():
    h, tracker = Harness(), RegionPushes((), 0.0)
    tracker.sync_regions(h.state, WORKERS.values(), {})
    [sync] = tracker.take_outbox()
    assert isinstance(sync, SyncRegion) and sync.region == "r1" and sync.busy == []
    assert sync.slices[0]["hosts"] == HOSTS and sync.slices[0]["accelerator"] == "v5litepod-16"
    tracker.sync_regions(h.state, WORKERS.values(), {})
    assert tracker.take_outbox() == []
    tracker.sync_regions(h.state, list(WORKERS.values())[:3], {}, unmet={"r2": {"cpu": 1}})
    synced = {s.region: s for s in tracker.take_outbox()}
    assert len(synced["r1"].slices[0]["hosts"]) == 3 and synced["r2"].unmet == {"cpu": 1}


def test_region_inventory_workers_without_a_slice_are_slices_of_one_and_busy_is_per_host():
    h = Harness()
    job = h.submit(spec("single", resources={"cpu": 1}))
    h.assign(job, 0, worker="c1")
    cpu = {w: WorkerInfo(w, "tcp://x:1", "r3", {"zone": "r3-a", "team": "infra"}, 8.0, 2**34,
                         0, 0.0, 0.0) for w in ("c1", "c2")}
    slices, busy = region_inventory(h.state, cpu.values(), {})["r3"]
    assert [s["slice_id"] for s in slices] == ["c1", "c2"] and busy == ["c1"]
    # Every attribute goes to the region: a gang may be constrained on any of them.
    assert slices[0]["accelerator"] is None
    assert slices[0]["attributes"] == {"zone": "r3-a", "team": "infra"}


def test_a_gang_constrained_on_any_worker_attribute_is_reserved_where_it_matches():
    """constraints={"team": "infra"} on a gang: the region's ledger learns every attribute
    of its hosts, so it reserves the slice that matches (before, only zone, scale group,
    preemptible, slice and pool travelled, and such a gang waited forever)."""
    def host(slice_id: str, i: int, team: str) -> WorkerInfo:
        return WorkerInfo(f"{slice_id}-h{i}", "tcp://x:1", "r1",
                          {"zone": "r1-a", "slice_id": slice_id, "team": team,
                           "accelerator_type": "v5litepod-16"}, 8.0, 2**34, 0, 0.0, 0.0)

    workers = [host("s0", i, "research") for i in range(4)] + \
        [host("s1", i, "infra") for i in range(4)]
    slices, _ = region_inventory(Harness().state, workers, {})["r1"]
    ledger = ReservationLedger("r1", [SliceSpec(s["slice_id"], s["accelerator"],
                                                tuple(s["hosts"]), s["attributes"])
                                      for s in slices], boot="b0")
    infra = GangShape("v5litepod-16", 4, 1, parse_constraints({"team": "infra"}))
    offer = ledger.reserve("g1", 1, infra, 10, now=0)
    assert isinstance(offer, Reserved) and all(h.startswith("s1-") for h in offer.hosts)
    nobody = GangShape("v5litepod-16", 4, 1, parse_constraints({"team": "nobody"}))
    assert isinstance(ledger.reserve("g2", 1, nobody, 10, now=0), Refused)


def test_the_gang_request_is_one_schema_type_from_the_pass_to_the_tracker():
    """GangRequest is the only gang request type (no GangAsk, no codec of its own): a schema
    dataclass, whole through wire/schema.py's encode and decode."""
    from iris.controller.scheduling.model import Demand
    from iris.wire import schema

    req = GangRequest("j#g0", "j", Band.BATCH, ("j[0]", "j[1]"), SHAPE, ("r1",), ("h0", "h1"),
                      Demand(1.0, 2**30, 4), ("tpu", "v5litepod"))
    assert schema.decode(GangRequest, schema.encode(req)) == req
