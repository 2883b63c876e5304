"""Kernel tests of the gangs object's two-phase reservation: requests and replies in, the
requests it sends each region and its rounds' outcomes out; no sockets and no sleeps."""

from __future__ import annotations

from iris.base.resources import Resources
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
from iris.controller.gangs.tracking import CoordinatorConfig, GangTracker, Phase
from iris.controller.scheduling.gang_placement import GangRequest
from iris.controller.scheduling.model import Band, Demand, GangShape, HostView, TaskDemand
from iris.controller.scheduling.scheduler import schedule

SHAPE = GangShape("v5litepod-16", hosts=4, whole_slices=1)
CONFIG = CoordinatorConfig(lease_s=10, gather_timeout_s=2, resend_s=1, backoff_initial_s=1,
                           backoff_max_s=8, max_attempts=3)
KEY = "g@1"  # the first round of gang g, as the regions name it


def sent(gangs: GangTracker, now: float, kind=None) -> list[tuple[str, object]]:
    """What the gangs object sends each region now, as (region, request)."""
    return [(s.region, m) for s in gangs.take_sends(now) for m in s.requests
            if kind is None or isinstance(m, kind)]


def reply(gangs: GangTracker, msg, now: float, kind=None) -> list[tuple[str, object]]:
    gangs.replied(msg.region, [msg], now)
    return sent(gangs, now, kind)


def fire(gangs: GangTracker, now: float | None = None, kind=None):
    """Fire the next live timer (or every timer due by `now`); what is sent then."""
    now = gangs.next_timer() if now is None else now
    gangs.fire_due(now)
    return sent(gangs, now, kind)


def offer(region, attempt=1, gang=KEY):
    return Reserved(region, gang, attempt, f"{region}/tok{attempt}", (f"{region}-h0",) * 4, 10)


def refuse(region, attempt=1, gang=KEY):
    return Refused(region, gang, attempt, "NO_CAPACITY", f"{region} is full")


def start(regions=("r1", "r2", "r3"), config=CONFIG, shape=SHAPE):
    gangs = GangTracker(config)
    gangs.request(GangRequest("g", "j", Band.BATCH,
                              tuple(f"j[{i}]" for i in range(shape.hosts)), shape, regions))
    return gangs, sent(gangs, 0)


def outcomes(gangs: GangTracker, phase: Phase):
    return [r for r in gangs.take_outcomes() if r.phase is phase]


def test_coordinator_asks_every_candidate_region_at_once():
    gangs, out = start()
    assert [(r, type(m)) for r, m in out] == [(r, ReserveRequest) for r in ("r1", "r2", "r3")]
    assert gangs.next_timer() == CONFIG.gather_timeout_s


def test_coordinator_commits_best_offer_and_aborts_the_rest():
    gangs, _ = start()
    assert reply(gangs, offer("r2"), 1) == []
    assert reply(gangs, offer("r3"), 1) == []
    out = reply(gangs, offer("r1"), 1)
    assert [m for m in out if isinstance(m[1], CommitRequest)] == [
        ("r1", CommitRequest(KEY, 1, "r1/tok1"))]
    assert sorted(r for r, m in out if isinstance(m, AbortRequest)) == ["r2", "r3"]
    reply(gangs, Committed("r1", KEY, 1, "r1/tok1", ("h",) * 4), 2)
    (placed,) = outcomes(gangs, Phase.PLACED)
    assert placed.key == KEY and placed.chosen.region == "r1" and placed.hosts == ("h",) * 4
    assert gangs.rounds[KEY].phase is Phase.PLACED and gangs.next_timer() is None


def test_coordinator_gather_timeout_decides_with_offers_in_hand_and_aborts_silent_ones():
    gangs, _ = start()
    reply(gangs, refuse("r1"), 1)
    reply(gangs, offer("r2"), 1)
    out = fire(gangs, 2)
    assert [r for r, m in out if isinstance(m, CommitRequest)] == ["r2"]
    assert ("r3", AbortRequest(KEY, 1)) in out


def test_coordinator_all_refusals_back_off_and_record_why():
    gangs, _ = start(("r1", "r2"))
    reply(gangs, refuse("r1"), 1)
    reply(gangs, refuse("r2"), 1)
    rnd = gangs.rounds[KEY]
    assert rnd.phase is Phase.BACKOFF and gangs.next_timer() == 1 + 1 == rnd.retry_at
    assert "r1 is full" in rnd.reasons["r1"] and "r2 is full" in rnd.reasons["r2"]
    retry = fire(gangs, kind=ReserveRequest)
    assert [req.attempt for _, req in retry] == [2, 2]


def test_coordinator_gives_up_after_max_attempts_with_the_reasons():
    gangs, _ = start(("r1",))
    for attempt in range(1, CONFIG.max_attempts + 1):
        reply(gangs, refuse("r1", attempt), attempt * 10)
        if attempt < CONFIG.max_attempts:
            fire(gangs, attempt * 10 + 9)
    (gave_up,) = outcomes(gangs, Phase.GIVEN_UP)
    assert "r1 is full" in gave_up.reasons["r1"]
    assert KEY not in gangs.rounds


def test_coordinator_backoff_doubles_up_to_the_cap():
    config = CoordinatorConfig(backoff_initial_s=1, backoff_max_s=3, max_attempts=10)
    gangs, _ = start(("r1",), config)
    delays, now = [], 0.0
    for attempt in range(1, 5):
        reply(gangs, refuse("r1", attempt), now)
        delays.append(gangs.next_timer() - now)
        now = gangs.next_timer()
        fire(gangs, now)
    assert delays == [1, 2, 3, 3]


def test_coordinator_late_offer_from_old_attempt_is_aborted():
    gangs, _ = start(("r1",))
    reply(gangs, refuse("r1"), 1)
    assert reply(gangs, offer("r1", attempt=1), 1.5) == [("r1", AbortRequest(KEY, 1))]


def test_coordinator_offer_for_unknown_gang_is_aborted():
    gangs = GangTracker(CONFIG)
    assert reply(gangs, offer("r1", gang="ghost"), 0) == [("r1", AbortRequest("ghost", 1))]


def test_coordinator_commit_resent_until_answered_then_refusal_retries_gang():
    gangs, _ = start(("r1",))
    reply(gangs, offer("r1"), 1)
    again = fire(gangs, 2)
    assert again == [("r1", CommitRequest(KEY, 1, "r1/tok1"))]
    assert gangs.next_timer() == 2 + 2  # resend delay doubles
    reply(gangs, CommitRefused("r1", KEY, 1, "r1/tok1", "EXPIRED", "lease ran out"), 3)
    assert gangs.rounds[KEY].phase is Phase.BACKOFF
    assert "EXPIRED" in gangs.rounds[KEY].reasons["r1"]


def test_coordinator_release_is_resent_until_the_region_acknowledges():
    gangs, _ = start(("r1",))
    reply(gangs, offer("r1"), 1)
    reply(gangs, Committed("r1", KEY, 1, "r1/tok1", ("h",) * 4), 1)
    gangs.release(KEY)
    assert sent(gangs, 5) == [("r1", ReleaseRequest(KEY, "r1/tok1"))]
    assert fire(gangs, 6) == [("r1", ReleaseRequest(KEY, "r1/tok1"))]
    gangs.take_outcomes()
    reply(gangs, Released("r1", KEY, "r1/tok1"), 7)
    assert [r.key for r in outcomes(gangs, Phase.RELEASED)] == [KEY] and KEY not in gangs.rounds


def test_coordinator_cancel_while_gathering_aborts_every_region():
    gangs, _ = start(("r1", "r2"))
    gangs.release(KEY)
    assert sorted(sent(gangs, 1)) == [("r1", AbortRequest(KEY, 1)), ("r2", AbortRequest(KEY, 1))]
    assert [r.key for r in outcomes(gangs, Phase.RELEASED)] == [KEY]


def test_coordinator_region_down_counts_as_refusal():
    gangs, _ = start(("r1", "r2"))
    reply(gangs, refuse("r1"), 1)
    gangs.region_down("r2", "unreachable", 1)
    assert gangs.rounds[KEY].reasons["r2"] == "region down"
    assert gangs.rounds[KEY].phase is Phase.BACKOFF


def test_coordinator_stale_timer_does_nothing():
    gangs, _ = start(("r1",))
    reply(gangs, offer("r1"), 1.5)  # committing: its resend is due at 2.5
    assert fire(gangs, CONFIG.gather_timeout_s) == []  # the gather's timer, now stale
    assert gangs.next_timer() == 2.5


def test_coordinator_places_what_the_scheduler_asked_for_in_real_ledgers():
    hosts = [HostView(f"{r}-s{s}-h{j}", r, f"{r}-b", Demand(32, 0, 4), slice_id=f"{r}-s{s}",
                      accelerator="v5litepod-16", accelerator_variant="v5litepod")
             for r in ("r1", "r2") for s in range(2) for j in range(4)]
    res = Resources(cpu=8, tpu="v5litepod-16", count=2)  # two whole slices: 8 hosts
    tasks = [TaskDemand(f"j1[{i}]", "j1", "ann", Band.PRODUCTION, res, (), "j1-g", 8)
             for i in range(8)]
    (ask,) = schedule(hosts, tasks).gang_requests
    ledgers = {r: ReservationLedger(r, slices_from_hosts(h for h in hosts if h.region == r))
               for r in ("r1", "r2")}
    gangs = GangTracker(CONFIG)
    gangs.request(ask)
    queue = sent(gangs, 0)
    while queue:
        region, request = queue.pop(0)
        answer = ledgers[region].handle(request, 1)
        queue += reply(gangs, answer, 1) if answer is not None else []
    (done,) = outcomes(gangs, Phase.PLACED)
    assert done.chosen.region == ask.regions[0] and len(done.hosts) == 8
    region = done.chosen.region
    assert {h.rsplit("-h", 1)[0] for h in done.hosts} == {f"{region}-s0", f"{region}-s1"}
    other = next(r for r in ledgers if r != region)
    assert ledgers[other].live(now=1) == []  # the losing offer was aborted, not left to expire
