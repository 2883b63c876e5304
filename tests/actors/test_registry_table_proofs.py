"""Kernel tier: with the controller's verifier, a held name changes only with its attempt's
proof (iris/actors/holders.py), and a spawned actor's name gets no other job's entry."""

from __future__ import annotations

import pytest

from iris.actors.holders import Holder, Proofs, proof_from_env
from iris.actors.registry import RegistryTable
from iris.base.errors import InvalidRequestError, PermissionDeniedError
from iris.controller.credentials import attempt_proof, proof_verifier

SECRET = b"s" * 32
HOLDER = Holder("/alice/svc", 0, "att-1", sole=True)
PROOF = attempt_proof(SECRET, "/alice/svc", 0, "att-1")


def _table() -> RegistryTable:
    table = RegistryTable(verify=proof_verifier(SECRET))
    table.register("/svc", "tcp://h:1", "/svc", "node-1", 3.0, 0.0, HOLDER, PROOF)
    return table


def _snapshot(table: RegistryTable) -> list:
    return [e.as_dict() for e in table.list("/", now=1.0)]


@pytest.mark.parametrize("call", [
    lambda t: t.unregister("/svc", now=1.0),
    lambda t: t.unregister("/svc", "tcp://h:1", "/svc", now=1.0, proof="0" * 64),
    lambda t: t.register("/svc", "tcp://e:9", "evil", "evil", 3.0, 1.0),  # beside it
    lambda t: t.register("/svc", "tcp://h:1", "/svc", "evil", 3.0, 1.0),  # over it
    lambda t: t.register("/svc", "tcp://e:9", "evil", "evil", 3.0, 1.0, HOLDER),
    lambda t: t.register("/svc", "tcp://e:9", "evil", "evil", 3.0, 1.0, HOLDER, "0" * 64),
    # Another attempt's proof does not prove this one (nor another job or task).
    lambda t: t.register("/svc", "tcp://e:9", "evil", "evil", 3.0, 1.0,
                         Holder("/alice/svc", 0, "att-1"), attempt_proof(SECRET, "/bob", 0,
                                                                          "att-1")),
    # A proved process of another job may not register beside a spawned actor either.
    lambda t: t.register("/svc", "tcp://e:9", "evil", "evil", 3.0, 1.0,
                         Holder("/bob", 0, "att-9"), attempt_proof(SECRET, "/bob", 0, "att-9")),
], ids=["unregister", "unregister-wrong-proof", "beside", "over", "claimed-holder",
        "wrong-proof", "proof-of-other-job", "other-job-proved"])
def test_without_the_proof_a_held_name_is_refused_naming_it_and_nothing_changes(call):
    table = _table()
    before = _snapshot(table)
    with pytest.raises(PermissionDeniedError, match="/svc"):
        call(table)
    assert _snapshot(table) == before


def test_with_the_proof_its_attempt_registers_renews_and_unregisters():
    table = _table()
    table.register("/svc", "tcp://h:1", "/svc", "node-1", 3.0, 1.0, HOLDER, PROOF)  # again
    assert table.renew("node-1", 3.0, now=2.0) == 0  # no proof: not renewed
    assert table.renew("node-1", 3.0, now=2.0, proof="0" * 64) == 0
    assert table.renew("node-1", 3.0, now=2.0, proof=PROOF) == 1
    assert table.lookup("/svc", now=4.5)  # renewed at 2.0 for 3 s
    assert table.unregister("/svc", "tcp://h:1", "/svc", now=5.0, proof=PROOF) == 1
    assert table.lookup("/svc", now=5.0) == []


def test_withdrawal_needs_no_proof_and_names_without_a_holder_keep_todays_rules():
    table = _table()
    table.register("/plain", "tcp://p:1", "/plain", "p", 3.0, 0.0)
    table.register("/plain", "tcp://p:2", "/plain", "q", 3.0, 0.0)  # a replica
    assert table.renew("p", 3.0, now=1.0) == 1
    assert table.unregister("/plain", now=1.0) == 2
    assert table.withdraw(["att-1"], now=1.0) == 1
    # Once its spawned actor is gone, the name is anyone's again.
    table.register("/svc", "tcp://e:9", "other", "o", 3.0, 1.0)


def test_a_registry_without_a_verifier_asks_no_proof():
    table = RegistryTable()
    table.register("/svc", "tcp://h:1", "/svc", "node-1", 3.0, 0.0, HOLDER)
    assert table.renew("node-1", 3.0, now=1.0) == 1
    assert table.unregister("/svc", now=1.0) == 1


def test_the_proof_comes_from_the_environment_and_a_malformed_one_is_refused():
    assert proof_from_env({"IRIS_ATTEMPT_PROOF": PROOF}) == PROOF
    assert proof_from_env({}) is None
    import asyncio

    from iris.actors.registry import Registry
    registry = Registry(verify=proof_verifier(SECRET))
    with pytest.raises(InvalidRequestError, match="proof"):
        asyncio.run(registry.unregister("/svc", None, None, 7))


def test_a_remembered_proof_proves_its_own_holder_only():
    calls: list = []
    verify = proof_verifier(SECRET)
    proofs = Proofs(lambda h, p: calls.append(h) or verify(h, p))
    proofs.remember(HOLDER, PROOF)
    assert proofs.proves(HOLDER, PROOF) and calls == []  # compared, not computed
    other = Holder("/bob", 0, "att-1")  # the same attempt id claimed for another job
    assert not proofs.proves(other, PROOF) and calls == [other]
    assert not proofs.proves(HOLDER, "0" * 64) and not proofs.proves(HOLDER, None)
    proofs.forget("att-1")
    assert proofs.proves(HOLDER, PROOF) and len(calls) == 4  # computed again
