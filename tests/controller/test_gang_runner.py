"""GangRunner on its owner's turn: requests batched per region until the owner flushes, replies
handled as messages of the owner, a failed call counted as the region being down, and a
malformed reply dropped without losing the good ones.

The owner's mailbox is a list the test runs message by message (as the Controller actor's
thread would); the node is a fake that hands each `handle_many` to a real ReservationLedger
and answers through a real ActorFuture, or leaves the call for the test to answer."""

from __future__ import annotations

from iris.actors import ActorFuture
from iris.base.clock import FakeClock
from iris.base.errors import PeerUnavailableError
from iris.controller.gangs.coordinator import CoordinatorConfig, Placed, Unplaceable
from iris.controller.gangs.ledger import ReservationLedger, SliceSpec
from iris.controller.gangs.protocol import decode_message, encode_message
from iris.controller.gangs.runner import GangRunner
from iris.controller.scheduling.model import GangShape

SHAPE = GangShape("v5litepod-16", hosts=4, whole_slices=1)
REGIONS = ("r1", "r2")


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


def _runner(node: FakeNode, **config):
    mailbox: list = []
    outcomes: list = []
    runner = GangRunner(node, lambda fn, *a: mailbox.append((fn, a)), node.clock,
                        regions={r: f"fake://{r}" for r in node.ledgers},
                        config=CoordinatorConfig(**config), on_outcome=outcomes.append)
    return runner, mailbox, outcomes


def _run_mailbox(mailbox: list, runner: GangRunner) -> None:
    """The owner's loop: run every queued message, then flush at the end of the queue (as
    the Controller actor does), until no reply is left to handle."""
    while True:
        while mailbox:
            fn, args = mailbox.pop(0)
            fn(*args)
        runner.flush()
        if not mailbox:
            return


def test_runner_batches_a_turns_requests_per_region_and_places_each_gang_whole():
    node = FakeNode(FakeClock(), {"r1": 2, "r2": 1})
    runner, mailbox, outcomes = _runner(node)
    for g in ("g1", "g2", "g3"):
        runner.place(g, SHAPE, REGIONS)
    assert node.calls == [] and mailbox == []  # nothing sent until the owner's flush
    _run_mailbox(mailbox, runner)
    assert sorted(node.calls[:2]) == [("r1", 3), ("r2", 3)]  # 3 reserves, one call each
    for _ in range(20):  # a gang that lost every offer to the others backs off and retries
        if sum(isinstance(o, Placed) for o in outcomes) == 3:
            break
        node.clock.advance(0.5)
        runner.fire_due(node.clock.monotonic())
        _run_mailbox(mailbox, runner)
    placed = [o for o in outcomes if isinstance(o, Placed)]
    assert sorted(p.gang_id for p in placed) == ["g1", "g2", "g3"]
    hosts = [h for p in placed for h in p.hosts]
    assert len(hosts) == len(set(hosts)) == 12
    assert all(len({h.rsplit("-h", 1)[0] for h in p.hosts}) == 1 for p in placed)


def test_runner_counts_a_region_whose_call_failed_as_down_and_gives_up_with_reasons():
    node = FakeNode(FakeClock(), {"r1": 0, "r2": 0}, silent=("r2",))
    runner, mailbox, outcomes = _runner(node, max_attempts=1)
    runner.place("g1", SHAPE, REGIONS)
    _run_mailbox(mailbox, runner)
    assert outcomes == []  # r1 refused; r2 has not answered
    node.pending[0].set_exception(PeerUnavailableError("r2 is unreachable"))
    _run_mailbox(mailbox, runner)
    [gave_up] = outcomes
    assert isinstance(gave_up, Unplaceable) and set(gave_up.reasons) == {"r1", "r2"}
    assert gave_up.reasons["r2"] == "region down"


def test_runner_drops_a_malformed_reply_and_keeps_the_good_ones(caplog):
    clock = FakeClock()
    node = FakeNode(clock, {"r1": 1, "r2": 1}, silent=("r1", "r2"))
    runner, mailbox, outcomes = _runner(node)
    runner.place("g1", SHAPE, REGIONS)
    _run_mailbox(mailbox, runner)
    offer = node.ledgers["r1"].handle(decode_message(encode_message(_reserve())), clock.monotonic())
    node.pending[0].set_result([{"type": "Reserved", "region": 7}, encode_message(offer)])
    node.pending[1].set_result([encode_message(node.ledgers["r2"].handle(_reserve(), 0.0))])
    node.silent = ()
    _run_mailbox(mailbox, runner)
    assert "malformed gang reply" in caplog.text
    assert [type(o).__name__ for o in outcomes] == ["Placed"]
    assert outcomes[0].region == "r1"  # the good offer in the bad batch was kept


def _reserve():
    from iris.controller.gangs.protocol import ReserveRequest
    return ReserveRequest("g1", 1, SHAPE, 10.0)


def test_runner_fires_due_timers_on_the_owners_tick_only():
    clock = FakeClock()
    node = FakeNode(clock, {"r1": 0, "r2": 0})
    runner, mailbox, outcomes = _runner(node, backoff_initial_s=0.5, max_attempts=2)
    runner.place("g1", SHAPE, REGIONS)
    _run_mailbox(mailbox, runner)  # refused everywhere: backs off 0.5 s
    calls = len(node.calls)
    clock.advance(0.4)
    runner.fire_due(clock.monotonic())
    _run_mailbox(mailbox, runner)
    assert len(node.calls) == calls and outcomes == []
    clock.advance(0.2)
    runner.fire_due(clock.monotonic())  # the retry: refused again, the gang is given up
    _run_mailbox(mailbox, runner)
    assert len(node.calls) > calls
    assert [type(o).__name__ for o in outcomes] == ["Unplaceable"]


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

    def handle_many(self, messages: list[dict]) -> list:
        replies = [self._ledger.handle(decode_message(m), self._clock.monotonic())
                   for m in messages]
        return [encode_message(r) if r is not None else None for r in replies]


def test_runner_reaches_a_hosted_region_on_its_turn_without_a_call():
    node = FakeNode(FakeClock(), {"r1": 1})
    runner, mailbox, outcomes = _runner(node)
    hosted = FakeHosted(node.ledgers["r1"], node.clock)
    runner.add_region("r1", hosted)
    runner.place("g1", SHAPE, ("r1",))
    for _ in range(3):  # reserve, then commit: each a turn of the region, replies in ours
        runner.flush()
        while hosted.turns:
            fn, args = hosted.turns.pop(0)
            fn(*args)
        _run_mailbox(mailbox, runner)
    assert node.calls == []  # nothing went through the node
    assert [type(o).__name__ for o in outcomes] == ["Placed"]
    assert outcomes[0].region == "r1" and len(outcomes[0].hosts) == 4
