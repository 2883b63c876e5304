"""Kernel tier: the registry table's leases, idempotence and replicas, with `now` passed in."""

from __future__ import annotations

import pytest

from iris.actors.registry import RegistryTable
from iris.base.errors import InvalidRequestError, OverloadedError


def test_register_is_idempotent_and_renews_the_lease():
    table = RegistryTable()
    first = table.register("/a", "tcp://h:1", "/a", "node-1", 3.0, now=10.0)
    again = table.register("/a", "tcp://h:1", "/a", "node-1", 3.0, now=12.0)
    assert again is first and first.expires_at == 15.0
    assert len(table.lookup("/a", now=14.0)) == 1


def test_lease_expires_without_renewal_and_survives_with_it():
    table = RegistryTable()
    table.register("/dead", "tcp://h:1", "/dead", "node-dead", 3.0, now=0.0)
    table.register("/live", "tcp://h:2", "/live", "node-live", 3.0, now=0.0)
    for now in (1.0, 2.0, 3.0, 4.0):
        table.renew("node-live", 3.0, now)
    assert table.lookup("/dead", now=4.0) == []
    assert [e.owner for e in table.lookup("/live", now=4.0)] == ["node-live"]
    assert table.expire(now=4.0) == 1


def test_renew_does_not_resurrect_an_expired_entry():
    table = RegistryTable()
    table.register("/x", "tcp://h:1", "/x", "node-1", 1.0, now=0.0)
    assert table.renew("node-1", 1.0, now=5.0) == 0  # tells the node to register again
    assert table.lookup("/x", now=5.0) == []


def test_replicas_resolve_oldest_first_and_unregister_one():
    table = RegistryTable()
    table.register("/r", "tcp://h:2", "/r", "node-2", 3.0, now=1.0)
    table.register("/r", "tcp://h:1", "/r", "node-1", 3.0, now=2.0)
    assert [e.address for e in table.lookup("/r", now=2.5)] == ["tcp://h:2", "tcp://h:1"]
    assert table.unregister("/r", "tcp://h:2") == 1
    assert [e.address for e in table.lookup("/r", now=2.5)] == ["tcp://h:1"]


def test_list_by_prefix_covers_a_job_tree():
    table = RegistryTable()
    for name in ("/alice/rl/trainer", "/alice/rl/rollout", "/bob/x"):
        table.register(name, "tcp://h:1", name, "n", 3.0, now=0.0)
    assert [e.name for e in table.list("/alice/", now=1.0)] == ["/alice/rl/rollout",
                                                               "/alice/rl/trainer"]


@pytest.mark.parametrize("name, address, lease, field", [
    ("/ok", "", 3.0, "address"),
    ("/ok", "tcp://h:1", 0, "lease_s"),
    ("/ok", "tcp://h:1", 10_000, "lease_s"),
])
def test_bad_registrations_are_refused_and_change_nothing(name, address, lease, field):
    table = RegistryTable()
    with pytest.raises(InvalidRequestError) as info:
        table.register(name, address, "/ok", "n", lease, now=0.0)
    assert info.value.field == field
    assert table.list("/", now=0.0) == []


def test_bad_name_is_refused():
    with pytest.raises(ValueError, match="invalid"):
        RegistryTable().register("no-slash", "tcp://h:1", "k", "n", 3.0, now=0.0)


def test_names_under_ever_new_owners_stop_at_the_tables_bound_and_lapse_free_room():
    """The owner is the caller's word: a peer naming a new one at each call is held by the
    bound on the whole table, refused for load with nothing changed, until leases lapse."""
    table = RegistryTable(max_names=100)
    for i in range(100):
        table.register(f"/flood/n{i}", "tcp://h:1", "k", f"owner-{i}", 3.0, now=0.0)
    with pytest.raises(OverloadedError, match="holds 100 names"):
        table.register("/alice/real", "tcp://h:2", "k", "owner-real", 3.0, now=1.0)
    assert table.lookup("/alice/real", 1.0) == [] and len(table.list("/", 1.0)) == 100
    # Renewing what is held is never refused; the flood's leases lapse, and there is room.
    table.register("/flood/n0", "tcp://h:1", "k", "owner-0", 3.0, now=1.0)
    table.register("/alice/real", "tcp://h:2", "k", "owner-real", 3.0, now=5.0)
    assert [e.name for e in table.list("/", 5.0)] == ["/alice/real"]
