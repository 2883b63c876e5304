"""The registry: absolute actor names -> endpoints, held by leases. A pure table and its actor.

`RegistryTable` is pure (now passed in). `Registry` is the actor shell around it, served by
the cluster's root node under REGISTRY_KEY. A node renews the leases of all the names it
registered with one `renew(owner)` call per RENEW_INTERVAL_S; when its process dies the
renewals stop and its names vanish after LEASE_S. A renew that finds nothing (the registry
restarted and forgot) tells the node to register its names again.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass

from iris.actors.hosting import actor
from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError
from iris.base.ids import normalize_path

REGISTRY_KEY = "/iris/registry"
# A dead host's names disappear within LEASE_S (the bound is 5 s); renewals every
# 1 s tolerate two lost renewals before a live actor would be dropped.
LEASE_S = 3.0
RENEW_INTERVAL_S = 1.0
# Upper bound on how long one resolve may park in the registry, so waiting callers cannot
# pile up forever.
MAX_WAIT_S = 600.0


@dataclass
class Endpoint:
    name: str
    address: str
    key: str  # the actor's key inside its node
    owner: str  # the node id that renews it
    registered_at: float
    expires_at: float

    def as_dict(self) -> dict:
        return asdict(self)


class RegistryTable:
    """Pure: registrations with leases. A name may have several endpoints (replicas)."""

    def __init__(self) -> None:
        self._names: dict[str, dict[tuple[str, str], Endpoint]] = {}

    def register(self, name: str, address: str, key: str, owner: str, lease_s: float,
                 now: float) -> Endpoint:
        """Idempotent: registering the same (name, address, key) again renews it."""
        name = normalize_path(name)
        for label, value in (("address", address), ("key", key), ("owner", owner)):
            if not isinstance(value, str) or not value:
                raise InvalidRequestError(f"register {name}: {label} must be a non-empty string",
                                          label)
        if not isinstance(lease_s, int | float) or not 0 < lease_s <= 3600:
            raise InvalidRequestError(f"register {name}: lease_s must be in (0, 3600]", "lease_s")
        entries = self._names.setdefault(name, {})
        existing = entries.get((address, key))
        if existing is not None:
            existing.owner = owner
            existing.expires_at = now + lease_s
            return existing
        entry = Endpoint(name, address, key, owner, now, now + lease_s)
        entries[(address, key)] = entry
        return entry

    def unregister(self, name: str, address: str | None = None, key: str | None = None) -> int:
        entries = self._names.get(name, {})
        doomed = [k for k in entries if address in (None, k[0]) and key in (None, k[1])]
        for k in doomed:
            del entries[k]
        if not entries:
            self._names.pop(name, None)
        return len(doomed)

    def renew(self, owner: str, lease_s: float, now: float) -> int:
        count = 0
        for entries in self._names.values():
            for entry in entries.values():
                if entry.owner == owner and entry.expires_at > now:
                    entry.expires_at = now + lease_s
                    count += 1
        return count

    def expire(self, now: float) -> int:
        removed = 0
        for name in list(self._names):
            entries = self._names[name]
            for k in [k for k, e in entries.items() if e.expires_at <= now]:
                del entries[k]
                removed += 1
            if not entries:
                del self._names[name]
        return removed

    def lookup(self, name: str, now: float) -> list[Endpoint]:
        """Live endpoints of `name`, oldest registration first."""
        entries = self._names.get(name)
        if not entries:
            return []
        return sorted((e for e in entries.values() if e.expires_at > now),
                      key=lambda e: (e.registered_at, e.address, e.key))

    def list(self, prefix: str, now: float) -> list[Endpoint]:
        return [e for name in sorted(self._names) if name.startswith(prefix)
                for e in self.lookup(name, now)]


@actor
class Registry:
    """The registry actor. Async methods: they run on the node's loop, never blocking it."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, lease_s: float = LEASE_S):
        self._clock = clock
        self._lease_s = lease_s
        self._table = RegistryTable()
        self._waiters: dict[str, list[asyncio.Future]] = {}

    async def register(self, name: str, address: str, key: str, owner: str,
                       lease_s: float | None = None) -> dict:
        entry = self._table.register(name, address, key, owner, lease_s or self._lease_s,
                                     self._clock.monotonic())
        for waiter in self._waiters.pop(entry.name, []):
            if not waiter.done():
                waiter.set_result(None)
        return entry.as_dict()

    async def unregister(self, name: str, address: str | None = None,
                         key: str | None = None) -> int:
        return self._table.unregister(name, address, key)

    async def renew(self, owner: str) -> int:
        now = self._clock.monotonic()
        self._table.expire(now)
        return self._table.renew(owner, self._lease_s, now)

    async def resolve(self, name: str, wait_s: float = 0.0) -> list[dict]:
        """Live endpoints of `name`; with wait_s > 0, wait up to that long for one to appear."""
        name = normalize_path(name)
        entries = self._table.lookup(name, self._clock.monotonic())
        if entries or wait_s <= 0:
            return [e.as_dict() for e in entries]
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(name, []).append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout=min(wait_s, MAX_WAIT_S))
        except TimeoutError:
            pass
        finally:
            waiters = self._waiters.get(name)
            if waiters and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[name]
        return [e.as_dict() for e in self._table.lookup(name, self._clock.monotonic())]

    async def resolve_any(self, names: list[str], wait_s: float = 0.0) -> list[dict]:
        """Endpoints of the first of `names` that is registered (waiting up to wait_s for
        any of them): how a relative name is looked up through enclosing namespaces."""
        names = [normalize_path(n) for n in names]
        deadline = self._clock.monotonic() + min(max(wait_s, 0.0), MAX_WAIT_S)
        while True:
            now = self._clock.monotonic()
            for name in names:
                entries = self._table.lookup(name, now)
                if entries:
                    return [e.as_dict() for e in entries]
            if now >= deadline:
                return []
            waiters = [asyncio.get_running_loop().create_future() for _ in names]
            for name, waiter in zip(names, waiters, strict=True):
                self._waiters.setdefault(name, []).append(waiter)
            try:
                await asyncio.wait(waiters, timeout=deadline - now,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for name, waiter in zip(names, waiters, strict=True):
                    pending = self._waiters.get(name)
                    if pending and waiter in pending:
                        pending.remove(waiter)
                        if not pending:
                            del self._waiters[name]

    async def list(self, prefix: str = "/") -> list[dict]:
        return [e.as_dict() for e in self._table.list(prefix, self._clock.monotonic())]
