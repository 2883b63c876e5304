"""The gangs object's frames and the actor's carrier (issue 30): requests batched per region
until the owner takes them at the end of its queue, replies handed back as events of the
owner, a failed call counted as the region being down, a malformed reply dropped without
losing the good ones, timers fired on the owner's tick only, and a Region actor this node
hosts reached on its turn without a call.

The owner's mailbox is a list the test runs message by message (as the Controller actor's
thread would); the node is a fake that hands each `handle_many` to a real ReservationLedger
and answers through a real ActorFuture, or leaves the call for the test to answer."""

from __future__ import annotations

from typing import NamedTuple

from iris.actors import ActorFuture
from iris.base.clock import FakeClock
from iris.base.errors import PeerUnavailableError
from iris.controller.gangs.ledger import ReservationLedger, SliceSpec
from iris.controller.gangs.protocol import ReserveRequest, decode_message, encode_message
from iris.controller.gangs.tracking import CoordinatorConfig, GangTracker, Phase
from iris.controller.regions.region import RegionCarrier
from iris.controller.scheduling.gang_placement import GangRequest
from iris.controller.scheduling.model import Band, GangShape

SHAPE = GangShape("v5litepod-16", hosts=4, whole_slices=1)
REGIONS = ("r1", "r2")


class Outcome(NamedTuple):
    phase: Phase
    region: str
    hosts: tuple[str, ...]
    reasons: dict[str, str]
    key: str


class FakeNode:
    """Calls go to in-memory ledgers (answered at once) or, for `silent` regions, wait for
    the test to fail them."""

    def __init__(self, clock: FakeClock, slices: dict[str, int], silent: tuple[str, ...] = ()):
        self.clock = clock
        self.ledgers = {r: ReservationLedger(r, [
            SliceSpec(f"{r}-s{i}", "v5litepod-16", tuple(f"{r}-s{i}-h{j}" for j in range(4)))
            for i in range(n)]) for r, n in slices.items()}
        self.silent = silent
        self.calls: list[tuple[str, int]] = []  # (region, how many requests)
        self.pending: list[ActorFuture] = []

    def call(self, address, actor, method, args, timeout_s=None, auth=None) -> ActorFuture:
        region = address.removeprefix("fake://")
        assert method == "handle_many"
        self.calls.append((region, len(args[0])))
        fut = ActorFuture(actor, method, address)
        if region in self.silent:
            self.pending.append(fut)
            return fut
        ledger = self.ledgers[region]
        replies = [ledger.handle(decode_message(m), self.clock.monotonic()) for m in args[0]]
        fut.set_result([encode_message(r) if r is not None else None for r in replies])
        return fut


class Owner:
    """What the Controller actor and its service are to the gangs object and the carrier: a
    mailbox, the requests replies come back as, and the take at the end of the queue."""

    def __init__(self, node: FakeNode, **config):
        self.clock = node.clock
        self.mailbox: list = []
        self.gangs = GangTracker(config=CoordinatorConfig(**config))
        self.carrier = RegionCarrier(node, lambda fn, *a: self.mailbox.append((fn, a)), self,
                                     regions={r: f"fake://{r}" for r in node.ledgers})
        self.outcomes: list = []

    def gang_replies(self, region, replies) -> None:
        self.gangs.replied(region, replies, self.clock.monotonic())

    def gang_region_down(self, region, why) -> None:
        self.gangs.region_down(region, why, self.clock.monotonic())

    def place(self, gang: str, regions=REGIONS) -> None:
        self.gangs.request(GangRequest(gang, f"{gang}-job", Band.BATCH,
                                       tuple(f"{gang}-job[{i}]" for i in range(4)), SHAPE,
                                       tuple(regions)))

    def take(self) -> None:
        """The end of the owner's queue: the frames go out, one SendRegion per region."""
        for send in self.gangs.take_sends(self.clock.monotonic()):
            self.carrier.send(send)
        # (phase, region, hosts, reasons) as each round was when it was taken
        self.outcomes += [Outcome(r.phase, r.chosen.region if r.chosen else "", r.hosts,
                                  dict(r.reasons), r.key) for r in self.gangs.take_outcomes()]

    def run(self) -> None:
        """Run every queued message, then take at the end of the queue, until no reply is
        left to handle."""
        while True:
            while self.mailbox:
                fn, args = self.mailbox.pop(0)
                fn(*args)
            self.take()
            if not self.mailbox:
                return

    def tick(self) -> None:
        self.gangs.fire_due(self.clock.monotonic())
        self.run()


def test_frames_of_a_turn_go_out_together_per_region_and_each_gang_is_placed_whole():
    node = FakeNode(FakeClock(), {"r1": 2, "r2": 1})
    owner = Owner(node)
    for g in ("g1", "g2", "g3"):
        owner.place(g)
    assert node.calls == [] and owner.mailbox == []  # nothing sent until the owner's take
    owner.run()
    assert sorted(node.calls[:2]) == [("r1", 3), ("r2", 3)]  # 3 reserves, one call each
    for _ in range(20):  # a gang that lost every offer to the others backs off and retries
        if sum(o.phase is Phase.PLACED for o in owner.outcomes) == 3:
            break
        node.clock.advance(0.5)
        owner.tick()
    placed = [o for o in owner.outcomes if o.phase is Phase.PLACED]
    assert sorted(p.key.split("@")[0] for p in placed) == ["g1", "g2", "g3"]
    hosts = [h for p in placed for h in p.hosts]
    assert len(hosts) == len(set(hosts)) == 12
    assert all(len({h.rsplit("-h", 1)[0] for h in p.hosts}) == 1 for p in placed)


def test_frames_held_until_the_end_of_the_queue_wait_for_the_take_that_flushes():
    node = FakeNode(FakeClock(), {"r1": 1, "r2": 1})
    owner = Owner(node)
    owner.place("g1")
    assert owner.gangs.take_sends(0.0, flush=False) == []  # more is queued behind this turn
    assert {s.region: len(s.requests) for s in owner.gangs.take_sends(0.0)} == \
        {"r1": 1, "r2": 1}


def test_a_region_whose_call_failed_counts_as_down_and_the_gang_gives_up_with_reasons():
    node = FakeNode(FakeClock(), {"r1": 0, "r2": 0}, silent=("r2",))
    owner = Owner(node, max_attempts=1)
    owner.place("g1")
    owner.run()
    assert owner.outcomes == []  # r1 refused; r2 has not answered
    node.pending[0].set_exception(PeerUnavailableError("r2 is unreachable"))
    owner.run()
    [gave_up] = owner.outcomes
    assert gave_up.phase is Phase.GIVEN_UP and set(gave_up.reasons) == {"r1", "r2"}
    assert gave_up.reasons["r2"] == "region down"


def test_a_region_nobody_serves_refuses_at_once():
    node = FakeNode(FakeClock(), {"r1": 0})
    owner = Owner(node, max_attempts=1)
    owner.place("g1", ("r1", "nowhere"))
    owner.run()
    [gave_up] = owner.outcomes
    assert gave_up.phase is Phase.GIVEN_UP and gave_up.reasons["nowhere"] == "region down"


def test_a_malformed_reply_is_dropped_and_the_good_ones_kept(caplog):
    clock = FakeClock()
    node = FakeNode(clock, {"r1": 1, "r2": 1}, silent=("r1", "r2"))
    owner = Owner(node)
    owner.place("g1")
    owner.run()
    [key] = [r.key for r in owner.gangs.reserving.values()]
    reserve = ReserveRequest(key, 1, SHAPE, 10.0)
    offer = node.ledgers["r1"].handle(reserve, clock.monotonic())
    node.pending[0].set_result([{"type": "Reserved", "region": 7}, encode_message(offer)])
    node.pending[1].set_result([encode_message(node.ledgers["r2"].handle(reserve, 0.0))])
    node.silent = ()
    owner.run()
    assert "malformed gang reply" in caplog.text
    assert [o.phase for o in owner.outcomes] == [Phase.PLACED]
    assert owner.outcomes[0].region == "r1"  # the good offer in the bad batch was kept


def test_timers_fire_on_the_owners_tick_only():
    clock = FakeClock()
    node = FakeNode(clock, {"r1": 0, "r2": 0})
    owner = Owner(node, backoff_initial_s=0.5, max_attempts=2)
    owner.place("g1")
    owner.run()  # refused everywhere: backs off 0.5 s
    calls = len(node.calls)
    clock.advance(0.4)
    owner.tick()
    assert len(node.calls) == calls and owner.outcomes == []
    clock.advance(0.2)
    owner.tick()  # the retry: refused again, the gang is given up
    assert len(node.calls) > calls
    assert [o.phase for o in owner.outcomes] == [Phase.GIVEN_UP]


class FakeHosted:
    """A Region actor this node hosts: requests are posted onto its turn (its own mailbox,
    run by the test), never sent as a call."""

    def __init__(self, ledger: ReservationLedger, clock: FakeClock):
        self.turns: list = []
        self.instance = self
        self._ledger, self._clock = ledger, clock

    def post(self, fn, *args) -> bool:
        self.turns.append((fn, args))
        return True

    def handle_requests(self, requests: list) -> list:
        """Region.handle_requests: typed requests in, typed replies out (no frames)."""
        return [self._ledger.handle(r, self._clock.monotonic()) for r in requests]


def test_a_hosted_region_is_reached_on_its_turn_without_a_call():
    node = FakeNode(FakeClock(), {"r1": 1})
    owner = Owner(node)
    hosted = FakeHosted(node.ledgers["r1"], node.clock)
    owner.carrier.regions["r1"] = hosted
    owner.place("g1", ("r1",))
    for _ in range(3):  # reserve, then commit: each a turn of the region, replies in ours
        owner.take()
        while hosted.turns:
            fn, args = hosted.turns.pop(0)
            fn(*args)
        owner.run()
    assert node.calls == []  # nothing went through the node
    assert [o.phase for o in owner.outcomes] == [Phase.PLACED]
    assert owner.outcomes[0].region == "r1" and len(owner.outcomes[0].hosts) == 4
