"""Only its task attempt changes a spawned actor's registry names (holders.py: proofs).
Real controller, worker and task processes; the attacker is a plain client on loopback,
which is what a compromised worker or any local process can be."""

from __future__ import annotations

import os
import signal
import threading
import uuid

import pytest

import iris
from iris.actors.keys import REGISTRY_KEY
from iris.actors.registry import LEASE_S
from iris.base.errors import PermissionDeniedError
from tests.cluster.test_crashes import free_port, start_controller, start_worker
from tests.conftest import stop_in_order

pytestmark = pytest.mark.slow


@iris.actor
class Tagged:
    def __init__(self, tag: str):
        self.tag = tag

    def who(self) -> str:
        return self.tag


def _registry(ctx, method: str, *args):
    return ctx.node.call(ctx.address, REGISTRY_KEY, method, args).result(60)


def _entry(ctx, name: str) -> dict:
    [entry] = [e for e in _registry(ctx, "list", "/") if e["name"] == name]
    return entry


def test_a_client_without_the_proof_cannot_unregister_or_shadow_a_spawned_actor(jobs_cluster):
    ctx = jobs_cluster
    name = f"/proof-{uuid.uuid4().hex[:6]}"
    actor = iris.spawn(Tagged, "real", name=name)
    assert actor.who().result(60) == "real"
    e = _entry(ctx, name)
    holder = {"job": e["job"], "task": e["task"], "attempt": e["attempt"], "sole": True}
    attacks = [
        ("unregister", name),
        ("unregister", name, e["address"], e["key"]),
        ("unregister", name, e["address"], e["key"], "0" * 64),  # a wrong proof
        ("register", name, "tcp://127.0.0.1:9", "evil", "evil-owner"),  # beside it
        ("register", name, e["address"], e["key"], "evil-owner"),  # over it, as no holder
        ("register", name, "tcp://127.0.0.1:9", "evil", "evil-owner", None, holder),
        ("register", name, "tcp://127.0.0.1:9", "evil", "evil-owner", None, holder, "0" * 64),
    ]
    for attack in attacks:
        with pytest.raises(PermissionDeniedError, match=name):
            _registry(ctx, *attack)
    # Renewing the actor's owner without the proof renews none of its names.
    assert _registry(ctx, "renew", e["owner"]) == 0
    assert _entry(ctx, name)["address"] == e["address"]  # nothing changed
    assert [r.address for r in iris.resolve_all(name).refs] == [e["address"]]
    assert iris.resolve(name).who().result(60) == "real"


def test_a_spawned_actor_still_registers_renews_and_is_withdrawn(jobs_cluster, wait_until):
    ctx = jobs_cluster
    name = f"/renewed-{uuid.uuid4().hex[:6]}"
    actor, job = iris.spawn_job(Tagged, "mine", name=name)
    first = _entry(ctx, name)
    threading.Event().wait(2 * LEASE_S)  # two leases: only its renewals (with proof) keep it
    assert _entry(ctx, name)["expires_at"] > first["expires_at"]
    assert iris.resolve(name).who().result(60) == "mine"
    job.kill()
    wait_until(lambda: not [e for e in _registry(ctx, "list", "/") if e["name"] == name],
               what=f"{name} to be withdrawn")
    assert actor.address == first["address"]


def _names(ctx, name: str) -> list[dict] | None:
    try:
        return [e for e in _registry(ctx, "list", "/") if e["name"] == name]
    except iris.IrisError:  # the controller is not back yet
        return None


def test_after_a_controller_restart_the_actor_registers_again_and_stays_its_own(
        tmp_path, wait_until):
    """The secret is in the state directory: a restarted controller's registry takes the
    running attempt's proof (its names come back at its next renewal) and still refuses
    a client without it."""
    address = f"tcp://127.0.0.1:{free_port()}"
    controller = start_controller(tmp_path / "state", address)
    workers = [start_worker(address, tmp_path / "w0")]
    name = f"/restarted-{uuid.uuid4().hex[:6]}"
    try:
        with iris.connect(address) as ctx:
            actor, job = iris.spawn_job(Tagged, "survivor", name=name)
            assert actor.who().result(60) == "survivor"
            os.killpg(controller.pid, signal.SIGKILL)
            controller.wait(30)
            controller = start_controller(tmp_path / "state", address)
            [entry] = wait_until(lambda: _names(ctx, name), what=f"{name} registered again")
            assert entry["address"] == actor.address
            with pytest.raises(PermissionDeniedError, match=name):
                _registry(ctx, "unregister", name)
            with pytest.raises(PermissionDeniedError, match=name):
                _registry(ctx, "register", name, "tcp://127.0.0.1:9", "evil", "evil-owner")
            threading.Event().wait(2 * LEASE_S)  # renewed with its proof, not lapsed
            assert [e["address"] for e in _names(ctx, name)] == [actor.address]
            assert iris.resolve(name).who().result(60) == "survivor"
            job.kill()
            wait_until(lambda: _names(ctx, name) == [], what=f"{name} withdrawn")
    finally:
        stop_in_order(workers, [controller])
