"""Kernel tests of the gang coordinator: events in, effects out, no sockets and no sleeps."""

from __future__ import annotations

from iris.base.resources import Resources
from iris.controller.gangs.coordinator import (
    CoordinatorConfig,
    GangCoordinator,
    GangReleased,
    Phase,
    Placed,
    PlaceGang,
    RegionDown,
    ReleaseGang,
    Send,
    SetTimer,
    Timer,
    Unplaceable,
)
from iris.controller.gangs.ledger import ReservationLedger, slices_from_hosts
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
)
from iris.controller.scheduling.model import Band, Demand, GangShape, HostView, TaskDemand
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import schedule

SHAPE = GangShape("v5litepod-16", hosts=4, whole_slices=1)
CONFIG = CoordinatorConfig(lease_s=10, gather_timeout_s=2, resend_s=1, backoff_initial_s=1,
                           backoff_max_s=8, max_attempts=3)


def sends(effects, kind=None):
    return [(e.region, e.request) for e in effects
            if isinstance(e, Send) and (kind is None or isinstance(e.request, kind))]


def timer(effects) -> SetTimer:
    return [e for e in effects if isinstance(e, SetTimer)][-1]


def offer(region, attempt=1, gang="g1"):
    return Reserved(region, gang, attempt, f"{region}/tok{attempt}", (f"{region}-h0",) * 4, 10)


def refuse(region, attempt=1, gang="g1"):
    return Refused(region, gang, attempt, "NO_CAPACITY", f"{region} is full")


def start(regions=("r1", "r2", "r3")):
    coord = GangCoordinator(CONFIG)
    return coord, coord.handle(PlaceGang("g1", SHAPE, regions), now=0)


def test_coordinator_asks_every_candidate_region_at_once():
    _, effects = start()
    assert [r for r, _ in sends(effects, ReserveRequest)] == ["r1", "r2", "r3"]
    assert timer(effects).at == CONFIG.gather_timeout_s


def test_coordinator_commits_best_offer_and_aborts_the_rest():
    coord, _ = start()
    assert coord.handle(offer("r2"), 1) == []
    assert coord.handle(offer("r3"), 1) == []
    effects = coord.handle(offer("r1"), 1)
    assert sends(effects, CommitRequest) == [("r1", CommitRequest("g1", 1, "r1/tok1"))]
    assert sorted(r for r, _ in sends(effects, AbortRequest)) == ["r2", "r3"]
    placed = coord.handle(Committed("r1", "g1", 1, "r1/tok1", ("h",) * 4), 2)
    assert [e for e in placed if isinstance(e, Placed)] == [
        Placed("g1", "r1", "r1/tok1", ("h",) * 4)]
    assert coord.record("g1").phase is Phase.PLACED and coord.pending_reason("g1") is None


def test_coordinator_gather_timeout_decides_with_offers_in_hand_and_aborts_silent_ones():
    coord, effects = start()
    coord.handle(refuse("r1"), 1)
    coord.handle(offer("r2"), 1)
    out = coord.handle(timer(effects).timer, 2)
    assert sends(out, CommitRequest)[0][0] == "r2"
    assert ("r3", AbortRequest("g1", 1)) in sends(out)


def test_coordinator_all_refusals_back_off_and_record_why():
    coord, _ = start(("r1", "r2"))
    coord.handle(refuse("r1"), 1)
    out = coord.handle(refuse("r2"), 1)
    assert coord.record("g1").phase is Phase.BACKOFF and timer(out).at == 1 + 1
    reason = coord.pending_reason("g1")
    assert reason.code is ReasonCode.WAITING_FOR_GANG
    assert "r1 is full" in reason.message and "r2 is full" in reason.message
    retry = coord.handle(timer(out).timer, 2)
    assert [req.attempt for _, req in sends(retry, ReserveRequest)] == [2, 2]


def test_coordinator_gives_up_after_max_attempts_with_the_reasons():
    coord, _ = start(("r1",))
    out = []
    for attempt in range(1, CONFIG.max_attempts + 1):
        out = coord.handle(refuse("r1", attempt), attempt * 10)
        if attempt < CONFIG.max_attempts:
            coord.handle(timer(out).timer, attempt * 10 + 9)
    (gave_up,) = [e for e in out if isinstance(e, Unplaceable)]
    assert "r1 is full" in gave_up.reasons["r1"]
    assert coord.record("g1") is None


def test_coordinator_backoff_doubles_up_to_the_cap():
    config = CoordinatorConfig(backoff_initial_s=1, backoff_max_s=3, max_attempts=10)
    coord = GangCoordinator(config)
    out = coord.handle(PlaceGang("g1", SHAPE, ("r1",)), 0)
    delays, now = [], 0.0
    for attempt in range(1, 5):
        out = coord.handle(refuse("r1", attempt), now)
        delays.append(timer(out).at - now)
        now = timer(out).at
        coord.handle(timer(out).timer, now)
    assert delays == [1, 2, 3, 3]


def test_coordinator_late_offer_from_old_attempt_is_aborted():
    coord, _ = start(("r1",))
    coord.handle(refuse("r1"), 1)
    out = coord.handle(offer("r1", attempt=1, gang="g1"), 1.5)
    assert sends(out) == [("r1", AbortRequest("g1", 1))]


def test_coordinator_offer_for_unknown_gang_is_aborted():
    coord = GangCoordinator(CONFIG)
    assert sends(coord.handle(offer("r1", gang="ghost"), 0)) == [
        ("r1", AbortRequest("ghost", 1))]


def test_coordinator_commit_resent_until_answered_then_refusal_retries_gang():
    coord, _ = start(("r1",))
    out = coord.handle(offer("r1"), 1)
    again = coord.handle(timer(out).timer, 2)
    assert sends(again, CommitRequest) == [("r1", CommitRequest("g1", 1, "r1/tok1"))]
    assert timer(again).at == 2 + 2  # resend delay doubles
    out = coord.handle(CommitRefused("r1", "g1", 1, "r1/tok1", "EXPIRED", "lease ran out"), 3)
    assert coord.record("g1").phase is Phase.BACKOFF
    assert "EXPIRED" in coord.record("g1").reasons["r1"]


def test_coordinator_release_is_resent_until_the_region_acknowledges():
    coord, _ = start(("r1",))
    coord.handle(offer("r1"), 1)
    coord.handle(Committed("r1", "g1", 1, "r1/tok1", ("h",) * 4), 1)
    out = coord.handle(ReleaseGang("g1"), 5)
    assert sends(out) == [("r1", ReleaseRequest("g1", "r1/tok1"))]
    assert sends(coord.handle(timer(out).timer, 6)) == [("r1", ReleaseRequest("g1", "r1/tok1"))]
    done = coord.handle(Released("r1", "g1", "r1/tok1"), 7)
    assert done == [GangReleased("g1")] and coord.record("g1") is None


def test_coordinator_cancel_while_gathering_aborts_every_region():
    coord, _ = start(("r1", "r2"))
    out = coord.handle(ReleaseGang("g1"), 1)
    assert sorted(sends(out)) == [("r1", AbortRequest("g1", 1)), ("r2", AbortRequest("g1", 1))]
    assert GangReleased("g1") in out


def test_coordinator_region_down_counts_as_refusal():
    coord, _ = start(("r1", "r2"))
    coord.handle(refuse("r1"), 1)
    coord.handle(RegionDown("r2"), 1)
    assert coord.record("g1").reasons["r2"] == "region down"
    assert coord.record("g1").phase is Phase.BACKOFF


def test_coordinator_stale_timer_does_nothing():
    coord, effects = start(("r1",))
    coord.handle(offer("r1"), 1)
    assert coord.handle(Timer("g1", timer(effects).timer.seq), 2) == []


def test_coordinator_places_what_the_scheduler_asked_for_in_real_ledgers():
    hosts = [HostView(f"{r}-s{s}-h{j}", r, f"{r}-b", Demand(32, 0, 4), slice_id=f"{r}-s{s}",
                      accelerator="v5litepod-16", accelerator_variant="v5litepod")
             for r in ("r1", "r2") for s in range(2) for j in range(4)]
    res = Resources(cpu=8, tpu="v5litepod-16", count=2)  # two whole slices: 8 hosts
    tasks = [TaskDemand(f"t{i}", "j1", "ann", Band.PRODUCTION, res, (), "j1-g", 8)
             for i in range(8)]
    (ask,) = schedule(hosts, tasks).gang_requests
    ledgers = {r: ReservationLedger(r, slices_from_hosts(h for h in hosts if h.region == r))
               for r in ("r1", "r2")}
    coord = GangCoordinator(CONFIG)
    queue = coord.handle(PlaceGang(ask.gang_id, ask.shape, ask.regions), 0)
    placed = []
    while queue:
        effect = queue.pop(0)
        if isinstance(effect, Send):
            reply = ledgers[effect.region].handle(effect.request, 1)
            queue += coord.handle(reply, 1) if reply is not None else []
        elif isinstance(effect, Placed):
            placed.append(effect)
    (done,) = placed
    assert done.region == ask.regions[0] and len(done.hosts) == 8
    assert {h.rsplit("-h", 1)[0] for h in done.hosts} == {f"{done.region}-s0",
                                                         f"{done.region}-s1"}
    other = next(r for r in ledgers if r != done.region)
    assert ledgers[other].live(now=1) == []  # the losing offer was aborted, not left to expire
