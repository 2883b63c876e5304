"""A task's context against a registry from before holders (same protocol version): it
refuses register's `holder` and resolve's `job`; the context learns that at the first refusal
and goes on without them, so a rolling upgrade that reaches workers first keeps serving."""

from __future__ import annotations

import iris
from iris.actors import ClusterContext, Node, NodeConfig, Registry
from iris.actors.registry import REGISTRY_KEY


@iris.actor
class OldRegistry(Registry):
    """The registry's methods as they were before holders: no holder, no job."""

    async def register(self, name: str, address: str, key: str, owner: str,
                       lease_s: float | None = None) -> dict:
        return await super().register(name, address, key, owner, lease_s)

    async def resolve(self, name: str, wait_s: float = 0.0) -> list[dict]:
        return await super().resolve(name, wait_s)


@iris.actor
class Echo:
    def echo(self, value):
        return value


def test_a_task_serves_and_resolves_by_job_through_an_older_registry(monkeypatch):
    monkeypatch.setenv("IRIS_JOB_ID", "/alice/j1")
    monkeypatch.setenv("IRIS_ATTEMPT_ID", "att-1")
    monkeypatch.setenv("IRIS_TASK_INDEX", "0")
    node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
    try:
        node.host(REGISTRY_KEY, OldRegistry)
        with ClusterContext(node, node.address) as ctx:
            ref = ctx.serve(Echo, "echo")
            assert ref.echo("hi").result(timeout=30) == "hi"
            group = ctx.resolve_all("/echo", timeout=5.0, job="/alice/j1")
            assert [r.echo(1).result(timeout=30) for r in group] == [1]
    finally:
        node.stop()


@iris.actor
class RegistryBeforeProofs(Registry):
    """The registry's methods as they were with holders, before proofs."""

    async def register(self, name: str, address: str, key: str, owner: str,
                       lease_s: float | None = None, holder: dict | None = None) -> dict:
        return await super().register(name, address, key, owner, lease_s, holder)

    async def unregister(self, name: str, address: str | None = None,
                         key: str | None = None) -> int:
        return await super().unregister(name, address, key)

    async def renew(self, owner: str) -> int:
        return await super().renew(owner)


def test_a_task_with_a_proof_serves_through_a_registry_from_before_proofs(monkeypatch):
    """It keeps its holder (the controller can still withdraw its names), renews and
    unregisters: the proof is not sent once refused."""
    monkeypatch.setenv("IRIS_JOB_ID", "/alice/j1")
    monkeypatch.setenv("IRIS_ATTEMPT_ID", "att-1")
    monkeypatch.setenv("IRIS_TASK_INDEX", "0")
    monkeypatch.setenv("IRIS_ATTEMPT_PROOF", "ab" * 32)
    node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
    try:
        node.host(REGISTRY_KEY, RegistryBeforeProofs)
        with ClusterContext(node, node.address) as ctx:
            ref = ctx.serve(Echo, "echo")
            assert ref.echo("hi").result(timeout=30) == "hi"
            [entry] = node.call(node.address, REGISTRY_KEY, "list", ("/",)).result(30)
            assert (entry["job"], entry["attempt"]) == ("/alice/j1", "att-1")
            assert ctx._registry("renew", node.id).result(30) == 1
            ctx.unserve("echo")
            assert node.call(node.address, REGISTRY_KEY, "list", ("/",)).result(30) == []
    finally:
        node.stop()
