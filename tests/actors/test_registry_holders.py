"""Kernel tier: names held by task attempts. Withdrawal when an attempt ends, refusal of a
withdrawn attempt, and which holder of a name is current (iris/actors/holders.py)."""

from __future__ import annotations

import asyncio

import pytest

from iris.actors.holders import Holder, Withdrawn, check_holder, holder_from_env, takeover_wait
from iris.actors.registry import Registry, RegistryTable
from iris.base.clock import FakeClock
from iris.base.errors import ConflictError, InvalidRequestError, StaleAttemptError


def _reg(table: RegistryTable, address: str, job: str, attempt: str, now: float,
         task: int = 0, sole: bool = True, name: str = "/svc") -> None:
    table.register(name, address, name, f"node-{address}", 3.0, now,
                   Holder(job, task, attempt, sole))


def test_withdrawing_an_attempt_drops_its_names_at_once_and_refuses_it_after():
    table = RegistryTable()
    _reg(table, "tcp://h:1", "/j1", "att-1", now=0.0)
    table.register("/other", "tcp://h:1", "/other", "node-tcp://h:1", 3.0, 0.0,
                   Holder("/j1", 0, "att-1"))
    table.register("/plain", "tcp://h:9", "/plain", "n9", 3.0, now=0.0)
    assert table.withdraw(["att-1", "att-never-registered"], now=0.5) == 2
    assert table.lookup("/svc", now=0.5) == [] and table.lookup("/other", now=0.5) == []
    assert [e.name for e in table.list("/", now=0.5)] == ["/plain"]
    # The stopping process renews, finds nothing, and registers again: refused.
    assert table.renew("node-tcp://h:1", 3.0, now=1.0) == 0
    with pytest.raises(StaleAttemptError, match="att-1 of /j1"):
        _reg(table, "tcp://h:1", "/j1", "att-1", now=1.0)
    # So is an attempt withdrawn before it ever registered (killed while starting).
    with pytest.raises(StaleAttemptError):
        _reg(table, "tcp://h:2", "/j1", "att-never-registered", now=1.0)
    assert table.lookup("/svc", now=1.0) == []


def test_a_newer_job_hides_an_older_one_while_its_lease_lasts():
    table = RegistryTable()
    _reg(table, "tcp://dead:1", "/svc-aaa", "att-1", now=0.0)  # its host vanished: no word
    _reg(table, "tcp://new:1", "/svc-bbb", "att-2", now=1.0)
    assert [e.address for e in table.lookup("/svc", now=1.5)] == ["tcp://new:1"]
    # Replicas of the newer job are all current.
    _reg(table, "tcp://new:2", "/svc-bbb", "att-3", now=1.2, task=1)
    assert [e.address for e in table.lookup("/svc", now=1.5)] == ["tcp://new:1", "tcp://new:2"]
    # The newer job withdrawn: the older one's entry shows again until its lease lapses.
    table.withdraw(["att-2", "att-3"], now=2.0)
    assert [e.address for e in table.lookup("/svc", now=2.0)] == ["tcp://dead:1"]
    assert table.lookup("/svc", now=3.0) == []


def test_a_newer_attempt_of_a_task_hides_the_older_one_even_when_names_are_shared():
    table = RegistryTable()
    # Subscribers of one group from two jobs (not sole): both jobs stay current...
    _reg(table, "tcp://a:1", "/rollouts-1", "att-a", now=0.0, sole=False)
    _reg(table, "tcp://b:1", "/rollouts-2", "att-b", now=0.5, sole=False)
    # ...but task 0 of the first job ran again: its earlier attempt is passed over.
    _reg(table, "tcp://a:2", "/rollouts-1", "att-a2", now=1.0, sole=False)
    assert [e.address for e in table.lookup("/svc", now=1.5)] == ["tcp://b:1", "tcp://a:2"]


def test_entries_without_a_holder_are_never_hidden():
    table = RegistryTable()
    table.register("/svc", "tcp://client:1", "/svc", "client", 3.0, now=0.0)
    _reg(table, "tcp://old:1", "/svc-aaa", "att-1", now=0.5)
    _reg(table, "tcp://new:1", "/svc-bbb", "att-2", now=1.0)
    assert [e.address for e in table.lookup("/svc", now=1.5)] == ["tcp://client:1",
                                                                 "tcp://new:1"]


def test_registering_again_under_another_holder_moves_the_entry():
    table = RegistryTable()
    _reg(table, "tcp://h:1", "/j1", "att-1", now=0.0)
    _reg(table, "tcp://h:1", "/j2", "att-2", now=0.5)  # same address and key
    assert table.withdraw(["att-1"], now=1.0) == 0
    assert [e.job for e in table.lookup("/svc", now=1.0)] == ["/j2"]
    assert table.withdraw(["att-2"], now=1.0) == 1


@pytest.mark.parametrize("holder, field", [
    ("att-1", "holder"),
    ({"job": "/j", "task": 0}, "holder"),
    ({"job": "/j", "task": 0, "attempt": "a", "extra": 1}, "holder"),
    ({"job": "", "task": 0, "attempt": "a"}, "holder.job"),
    ({"job": "/j", "task": -1, "attempt": "a"}, "holder.task"),
    ({"job": "/j", "task": True, "attempt": "a"}, "holder.task"),
    ({"job": "/j", "task": 0, "attempt": ""}, "holder.attempt"),
    ({"job": "/j", "task": 0, "attempt": "a", "sole": "yes"}, "holder.sole"),
])
def test_bad_holders_are_refused_naming_the_field(holder, field):
    with pytest.raises(InvalidRequestError) as info:
        check_holder("/svc", holder)
    assert info.value.field == field


def test_the_registry_actor_refuses_a_bad_holder_and_changes_nothing():
    registry = Registry(clock=FakeClock())
    with pytest.raises(InvalidRequestError, match="holder.task"):
        asyncio.run(registry.register("/svc", "tcp://h:1", "/svc", "n", None,
                                      {"job": "/j", "task": "0", "attempt": "a"}))
    assert asyncio.run(registry.list("/")) == []


@pytest.mark.parametrize("attempts", ["att-1", [""], [1], ["x" * 257]])
def test_bad_withdrawals_are_refused_and_change_nothing(attempts):
    table = RegistryTable()
    _reg(table, "tcp://h:1", "/j1", "att-1", now=0.0)
    with pytest.raises(InvalidRequestError) as info:
        table.withdraw(attempts, now=0.5)
    assert info.value.field == "attempts"
    assert len(table.lookup("/svc", now=0.5)) == 1 and len(table.withdrawn) == 0


def test_resolve_for_a_job_waits_for_that_job_not_an_earlier_one():
    async def scenario() -> tuple[list, list]:
        registry = Registry()
        await registry.register("/svc", "tcp://old:1", "/svc", "n-old", None,
                                {"job": "/svc-aaa", "task": 0, "attempt": "a1", "sole": True})
        waiting = asyncio.ensure_future(registry.resolve("/svc", 30.0, "/svc-bbb"))
        await asyncio.sleep(0)
        assert not waiting.done()  # the earlier job's actor is not this job's
        await registry.register("/svc", "tcp://new:1", "/svc", "n-new", None,
                                {"job": "/svc-bbb", "task": 0, "attempt": "b1", "sole": True})
        return await waiting, await registry.resolve("/svc")

    mine, anyone = asyncio.run(scenario())
    assert [e["address"] for e in mine] == ["tcp://new:1"]
    assert [e["address"] for e in anyone] == ["tcp://new:1"]


def test_a_spawned_name_waits_for_a_silent_holders_lease_and_is_refused_a_renewing_one():
    table = RegistryTable()
    _reg(table, "tcp://a:1", "/svc-aaa", "att-a", now=0.0)  # lease until 3.0
    table.register("/svc", "tcp://p:1", "/svc", "n-p", 3.0, 0.5)  # outside any task
    seen: dict = {}
    assert table.held_against("/svc", "/svc-aaa", now=1.0) == table.lookup("/svc", 1.0)[1:]
    held = table.held_against("/svc", "/svc-bbb", now=1.0)
    assert [e.address for e in held] == ["tcp://a:1", "tcp://p:1"]
    assert takeover_wait("/svc", held, seen, now=1.0, deadline=11.0) == 2.0  # a's lease
    table.withdraw(["att-a"], now=1.5)  # a ended; p's process is silent: its lease runs out
    held = table.held_against("/svc", "/svc-bbb", now=3.0)
    assert takeover_wait("/svc", held, seen, now=3.0, deadline=11.0) == 0.5
    assert takeover_wait("/svc", table.held_against("/svc", "/svc-bbb", 3.6), seen, now=3.6,
                         deadline=11.0) == 0.0  # free: nothing live is another's
    # A holder that renews past the lease it had when first seen is alive: refused.
    _reg(table, "tcp://c:1", "/svc-ccc", "att-c", now=4.0)
    seen = {}
    assert takeover_wait("/svc", table.held_against("/svc", "/svc-ddd", 4.0), seen, 4.0,
                         14.0) == 3.0
    table.renew("node-tcp://c:1", 3.0, now=6.0)
    with pytest.raises(ConflictError, match=r"/svc: an actor is already registered under "
                                            r"this name \(job /svc-ccc, at tcp://c:1\)"):
        takeover_wait("/svc", table.held_against("/svc", "/svc-ddd", 7.0), seen, 7.0, 14.0)
    # A lease longer than the wait's bound is not waited out.
    with pytest.raises(ConflictError):
        takeover_wait("/svc", table.held_against("/svc", "/svc-ddd", 7.0), {}, 7.0, 8.0)


def test_the_registry_actor_refuses_a_live_holders_spawned_name_and_lets_a_withdrawn_go():
    """Real loop and clock, short leases: the second spawn's registration is refused while
    the first renews, and goes through at once when the first is withdrawn."""
    def holder(job: str, attempt: str) -> dict:
        return {"job": job, "task": 0, "attempt": attempt, "sole": True}

    async def scenario() -> tuple[BaseException | None, list]:
        registry = Registry(lease_s=0.3)
        await registry.register("/svc", "tcp://a:1", "/svc", "n-a", None, holder("/j-a", "a1"))

        async def renewing() -> None:
            while True:
                await registry.renew("n-a")
                await asyncio.sleep(0.1)

        renewer = asyncio.ensure_future(renewing())
        try:
            await registry.register("/svc", "tcp://b:1", "/svc", "n-b", None,
                                    holder("/j-b", "b1"))
            refused = None
        except ConflictError as exc:
            refused = exc
        later = asyncio.ensure_future(registry.register("/svc", "tcp://c:1", "/svc", "n-c",
                                                        None, holder("/j-c", "c1")))
        await asyncio.sleep(0.05)
        assert not later.done()
        registry._withdraw(["a1"])  # the controller ended a's attempt: c goes in now
        await asyncio.wait_for(later, 1.0)
        renewer.cancel()
        return refused, [e["address"] for e in await registry.resolve("/svc")]

    refused, addresses = asyncio.run(scenario())
    assert isinstance(refused, ConflictError) and "job /j-a" in str(refused)
    assert addresses == ["tcp://c:1"]


def test_an_endpoint_has_ended_when_withdrawn_or_unregistered_not_when_its_lease_lapsed():
    table = RegistryTable()
    for addr, attempt in [("tcp://w:1", "att-w"), ("tcp://u:1", "att-u"), ("tcp://l:1", "att-l")]:
        _reg(table, addr, f"/j-{attempt}", attempt, now=0.0, name="/svc")
    assert not any(table.ended("/svc", a, "/svc", 1.0)
                   for a in ("tcp://w:1", "tcp://u:1", "tcp://l:1"))  # all live
    table.withdraw(["att-w"], now=1.0)
    table.unregister("/svc", "tcp://u:1", "/svc", now=1.0)
    assert table.ended("/svc", "tcp://w:1", "/svc", 1.5)  # its attempt ended
    assert table.ended("/svc", "tcp://u:1", "/svc", 1.5)  # it stopped serving
    assert not table.ended("/svc", "tcp://l:1", "/svc", 5.0)  # lapsed: perhaps cut off
    assert not table.ended("/svc", "tcp://never:1", "/svc", 5.0)
    assert table.ended_of_job("/j-att-w", 1.5) == [("/svc", "tcp://w:1", "/svc")]
    assert table.ended_of_job("/j-att-l", 5.0) == []  # a lapse is not an end
    table.register("/svc", "tcp://u:1", "/svc", "n-u", 3.0, 6.0)  # served again there
    assert not table.ended("/svc", "tcp://u:1", "/svc", 6.5)
    assert table.ended_of_job("/j-att-u", 6.5) == []


def test_withdrawn_attempts_are_forgotten_after_a_while_and_beyond_a_bound():
    withdrawn = Withdrawn(keep_s=10.0, limit=3)
    for i in range(4):
        withdrawn.add(f"a{i}", now=float(i))
    assert not withdrawn.has("a0", now=4.0) and withdrawn.has("a1", now=4.0)
    assert not withdrawn.has("a1", now=11.0) and withdrawn.has("a3", now=11.0)


def test_the_holder_comes_from_the_task_environment():
    env = {"IRIS_JOB_ID": "/alice/svc-1", "IRIS_TASK_INDEX": "2", "IRIS_ATTEMPT_ID": "att-9"}
    assert holder_from_env(env) == {"job": "/alice/svc-1", "task": 2, "attempt": "att-9"}
    assert holder_from_env({"IRIS_JOB_ID": "/j"}) is None  # the in-process backend's tasks
    assert holder_from_env({}) is None
