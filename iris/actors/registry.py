"""The registry: absolute actor names -> endpoints, held by leases. A pure table and its actor.

`RegistryTable` is pure (now passed in). `Registry` is the actor shell around it, served by
the cluster's root node under REGISTRY_KEY. A node renews the leases of all the names it
registered with one `renew(owner)` call per RENEW_INTERVAL_S; when its process dies the
renewals stop and its names vanish after LEASE_S. A renew that finds nothing (the registry
restarted and forgot) tells the node to register its names again.

A name served by a task carries its holder: the job, the task index and the attempt id (the
controller's fencing token). The controller withdraws an attempt's names the moment that
attempt ends (killed, exited, its worker lost), and a withdrawn attempt may not register
again; while a dead holder's lease still runs, a newer attempt of the same task, or for a
spawned actor's name a newer job, registering the name hides it. So a name served again
after its actor was stopped resolves to the new actor, never the old one (holders.py).

A spawned actor's name (`sole`) is its job's alone while its holder lives: registering it
for another job waits until every other live entry of the name is gone (withdrawn,
unregistered, or its lease run out: a dead host's, within LEASE_S), and is refused with
ConflictError once one of them outlives the lease it had when first seen, since only a live
holder renews. Decided here, on the registry's one loop, so two spawns cannot both win.

The controller's registry has a verifier (`verify`): a holder's names are registered,
unregistered and renewed only with its attempt's proof (holders.py), so no other process
can take a task's names away or register beside a spawned actor's.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass

from iris.actors.holders import (
    NO_HOLDER,
    Holder,
    Proofs,
    Verify,
    Withdrawn,
    check_holder,
    check_proof,
    current_only,
    refuse_shadow,
    refuse_unproved,
    takeover_wait,
)
from iris.actors.hosting import HostedActor, actor
from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError, OverloadedError, StaleAttemptError
from iris.base.ids import normalize_path

REGISTRY_KEY = "/iris/registry"
# A dead host's names disappear within LEASE_S (the bound is 5 s); renewals every
# 1 s tolerate two lost renewals before a live actor would be dropped.
LEASE_S = 3.0
RENEW_INTERVAL_S = 1.0
# One process serving this many names is a bug or an attack; each name costs registry memory.
MAX_NAMES_PER_OWNER = 10_000
# ...and the owner is whatever the caller says, so the table has a bound of its own: a peer
# naming a new owner at each call registered 20,000 names past the per-owner limit. About
# 1 KiB each (the endpoint, its indexes): at most ~0.5 GB; 50 names a host at 10,000 hosts.
MAX_NAMES = 500_000
# Upper bound on how long one resolve may park in the registry, so waiting callers cannot
# pile up forever.
MAX_WAIT_S = 600.0
# Upper bound on how long a spawned actor's registration waits for another holder of its
# name to prove dead: past LEASE_S (3 s), well inside the caller's 30 s registry timeout.
MAX_TAKEOVER_WAIT_S = 10.0
# Jobs whose stopped endpoints are remembered (`ended_of_job`), the oldest forgotten first.
MAX_STOPPED_JOBS = 10_000
# A wait for a lease to end wakes this much after it, so the lease has surely ended.
_EXPIRY_SLACK_S = 0.05


@dataclass
class Endpoint:
    name: str
    address: str
    key: str  # the actor's key inside its node
    owner: str  # the node id that renews it
    registered_at: float
    expires_at: float
    job: str = ""  # the holder (holders.py); "" when not served by a task
    task: int = -1
    attempt: str = ""
    sole: bool = False

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def holder(self) -> Holder:
        return Holder(self.job, self.task, self.attempt, self.sole)


class RegistryTable:
    """Pure: registrations with leases. A name may have several endpoints (replicas).

    Costs grow with what changed, not with the table (issue: at 1,750 hosts, 62-92% of the
    controller's time went to renewals that walked every name): a renewal touches only its
    owner's names, and expiry pops a deadline heap, so both are O(log N) per call.
    """

    def __init__(self, max_names: int = MAX_NAMES, verify: Verify | None = None) -> None:
        self._max_names = max_names
        # Proofs of holders (holders.py); None: not asked for.
        self._proofs = Proofs(verify) if verify is not None else None
        self._count = 0  # endpoints held, expired ones not yet dropped included
        self._names: dict[str, dict[tuple[str, str], Endpoint]] = {}
        self._owned: dict[str, set[tuple[str, str, str]]] = {}  # owner -> (name, address, key)
        self._held: dict[str, set[tuple[str, str, str]]] = {}  # attempt id -> its entries
        self._deadlines: list[tuple[float, str]] = []  # (expiry, owner); stale ones skipped
        self.withdrawn = Withdrawn()
        # Endpoints withdrawn or unregistered (not lapsed): known to have stopped, so a
        # caller whose call failed there is told the actor died (`ended`).
        self.stopped = Withdrawn()
        # The same, by job (the newest MAX_STOPPED_JOBS jobs): what a job's kill stopped.
        self._stopped_jobs: OrderedDict[str, list[tuple[str, str, str]]] = OrderedDict()

    @property
    def verify(self) -> Verify | None:
        return self._proofs.proves if self._proofs is not None else None

    def register(self, name: str, address: str, key: str, owner: str, lease_s: float,
                 now: float, holder: Holder = NO_HOLDER, proof: str | None = None) -> Endpoint:
        """Idempotent: registering the same (name, address, key) again renews it. Refused
        (StaleAttemptError) for a holder whose attempt was withdrawn: it has ended; with a
        verifier, PermissionDeniedError without the proof of `holder` and of the holder of
        the entry it would replace, or beside another job's spawned actor."""
        if not isinstance(name, str):
            raise InvalidRequestError(f"name: expected a string, got {type(name).__name__}",
                                      "name")
        name = normalize_path(name)
        for label, value in (("address", address), ("key", key), ("owner", owner)):
            if not isinstance(value, str) or not value or len(value) > 1024:
                raise InvalidRequestError(
                    f"register {name}: {label} must be a non-empty string of at most 1024 "
                    "characters", label)
        if isinstance(lease_s, bool) or not isinstance(lease_s, int | float) \
                or not 0 < lease_s <= 3600:
            raise InvalidRequestError(f"register {name}: lease_s must be in (0, 3600]", "lease_s")
        if holder.attempt and self.withdrawn.has(holder.attempt, now):
            raise StaleAttemptError(
                f"register {name}: attempt {holder.attempt} of {holder.job}[{holder.task}] "
                "has ended (its names were withdrawn)")
        self.expire(now)
        existing = self._names.get(name, {}).get((address, key))
        refuse_unproved(name, "register", [holder] + ([existing.holder] if existing else []),
                        proof, self.verify)
        refuse_shadow(name, holder, self.lookup(name, now), self.verify)
        if existing is None and self._count >= self._max_names:
            raise OverloadedError(f"register {name}: the registry holds {self._count} names "
                                  "(the limit); retry once leases lapse", retry_after_s=5.0)
        entries = self._names.setdefault(name, {})
        if existing is None and len(self._owned.get(owner, ())) >= MAX_NAMES_PER_OWNER:
            if not entries:
                del self._names[name]
            raise InvalidRequestError(
                f"register {name}: owner {owner} already holds {MAX_NAMES_PER_OWNER} names "
                "(the limit per process)", "name")
        if existing is not None:
            self._disown(existing)
            existing.owner = owner
            existing.expires_at = now + lease_s
            existing.job, existing.task, existing.attempt, existing.sole = holder
            entry = existing
        else:
            entry = entries[(address, key)] = Endpoint(name, address, key, owner, now,
                                                       now + lease_s, *holder)
            self._count += 1
        self._owned.setdefault(owner, set()).add((name, address, key))
        if holder.attempt:
            self._held.setdefault(holder.attempt, set()).add((name, address, key))
            if self._proofs is not None:  # proved above
                self._proofs.remember(holder, proof or "")
        heapq.heappush(self._deadlines, (entry.expires_at, owner))
        return entry

    def unregister(self, name: str, address: str | None = None, key: str | None = None,
                   now: float | None = None, proof: str | None = None) -> int:
        """Drop these entries; with `now`, remember them as stopped (`ended`). With a
        verifier, refused (PermissionDeniedError, nothing dropped) unless `proof` proves
        the holder of each entry that has one."""
        if not isinstance(name, str):
            raise InvalidRequestError("name: expected a string", "name")
        entries = self._names.get(name, {})
        doomed = [k for k in entries if address in (None, k[0]) and key in (None, k[1])]
        refuse_unproved(name, "unregister", [entries[k].holder for k in doomed], proof,
                        self.verify)
        return self._drop(name, doomed, now)

    def _drop(self, name: str, doomed: list[tuple[str, str]], now: float | None) -> int:
        entries = self._names.get(name, {})
        for k in doomed:
            entry = entries.pop(k)
            self._disown(entry)
            if now is not None:
                self.stopped.add(_endpoint_id(name, *k), now)
                if entry.job:
                    self._stopped_of_job(entry.job).append((name, *k))
        self._count -= len(doomed)
        if not entries:
            self._names.pop(name, None)
        return len(doomed)

    def withdraw(self, attempts: list[str], now: float) -> int:
        """The attempts ended: drop their names now, and refuse them from now on."""
        if not isinstance(attempts, list) or not all(
                isinstance(a, str) and 0 < len(a) <= 256 for a in attempts):
            raise InvalidRequestError("withdraw: attempts must be a list of attempt ids "
                                      "(non-empty strings of at most 256 characters)",
                                      "attempts")
        removed = 0
        for attempt in attempts:
            self.withdrawn.add(attempt, now)
            for name, address, key in list(self._held.get(attempt, ())):
                removed += self._drop(name, [(address, key)], now)
        return removed

    def _stopped_of_job(self, job: str) -> list[tuple[str, str, str]]:
        jobs = self._stopped_jobs
        if job not in jobs:
            jobs[job] = []
            while len(jobs) > MAX_STOPPED_JOBS:
                jobs.popitem(last=False)
        return jobs[job]

    def ended_of_job(self, job: str, now: float) -> list[tuple[str, str, str]]:
        """(name, address, key) of the endpoints `job`'s tasks held that have ended."""
        return [e for e in self._stopped_jobs.get(job, ()) if self.ended(*e, now)]

    def ended(self, name: str, address: str, key: str, now: float) -> bool:
        """Was this endpoint withdrawn or unregistered (not merely lapsed), and not served
        again since? Then its actor has stopped, as far as the cluster knows."""
        live = self._names.get(name, {}).get((address, key))
        if live is not None and live.expires_at > now:
            return False
        return self.stopped.has(_endpoint_id(name, address, key), now)

    def renew(self, owner: str, lease_s: float, now: float, proof: str | None = None) -> int:
        """Extend every live name of `owner`: O(its names), not O(the table). With a
        verifier, only those without a holder or whose holder `proof` proves."""
        count = 0
        proved: dict[Holder, bool] = {}
        for name, address, key in self._owned.get(owner, ()):
            entry = self._names[name][(address, key)]
            if entry.attempt and self._proofs is not None:
                holder = entry.holder
                if holder not in proved:
                    proved[holder] = self._proofs.proves(holder, proof)
                if not proved[holder]:
                    continue
            if entry.expires_at > now:
                entry.expires_at = now + lease_s
                count += 1
        if count:
            heapq.heappush(self._deadlines, (now + lease_s, owner))
        return count

    def expire(self, now: float) -> int:
        """Drop the names whose leases lapsed: only owners with a deadline due are looked at."""
        removed = 0
        while self._deadlines and self._deadlines[0][0] <= now:
            _, owner = heapq.heappop(self._deadlines)
            for name, address, key in list(self._owned.get(owner, ())):
                entries = self._names[name]
                if entries[(address, key)].expires_at <= now:
                    self._disown(entries.pop((address, key)))
                    self._count -= 1
                    removed += 1
                    if not entries:
                        del self._names[name]
        return removed

    def _disown(self, entry: Endpoint) -> None:
        owned = self._owned.get(entry.owner)
        if owned is not None:
            owned.discard((entry.name, entry.address, entry.key))
            if not owned:
                del self._owned[entry.owner]
        held = self._held.get(entry.attempt) if entry.attempt else None
        if held is not None:
            held.discard((entry.name, entry.address, entry.key))
            if not held:
                del self._held[entry.attempt]
                if self._proofs is not None:
                    self._proofs.forget(entry.attempt)

    def held_against(self, name: str, job: str, now: float) -> list[Endpoint]:
        """Live entries of `name` that `job`'s spawned actor may not share: another job's,
        or a process's outside any task."""
        entries = self._names.get(name, {})
        return [e for e in entries.values() if e.expires_at > now and e.job != job]

    def lookup(self, name: str, now: float) -> list[Endpoint]:
        """Live endpoints of `name` held by its current holders, oldest registration first
        (a newer job's, or a newer attempt's, hide those they replace: holders.py)."""
        entries = self._names.get(name)
        if not entries:
            return []
        return current_only(sorted((e for e in entries.values() if e.expires_at > now),
                                   key=lambda e: (e.registered_at, e.address, e.key)))

    def list(self, prefix: str, now: float) -> list[Endpoint]:
        return [e for name in sorted(self._names) if name.startswith(prefix)
                for e in self.lookup(name, now)]


def _endpoint_id(name: str, address: str, key: str) -> str:
    return f"{name}\n{address}\n{key}"


@actor
class Registry:
    """The registry actor. Async methods: they run on the node's loop, never blocking it."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, lease_s: float = LEASE_S,
                 verify: Verify | None = None):
        """`verify`: how the controller proves holders (holders.py); None asks no proof."""
        self._clock = clock
        self._lease_s = lease_s
        self._table = RegistryTable(verify=verify)
        self._waiters: dict[str, list[asyncio.Future]] = {}
        self._released: list[asyncio.Future] = []  # waiting for names to go (_next_release)

    async def register(self, name: str, address: str, key: str, owner: str,
                       lease_s: float | None = None, holder: dict | None = None,
                       proof: str | None = None) -> dict:
        """`holder`: the task attempt serving the name ({"job", "task", "attempt"}), so the
        controller can withdraw it when that attempt ends; None outside a task. `proof`:
        that attempt's $IRIS_ATTEMPT_PROOF (holders.py)."""
        checked = check_holder(name if isinstance(name, str) else "?", holder)
        proof = check_proof(f"register {name!r:.200}", proof)
        # Before any wait: an unproved holder is refused at once.
        refuse_unproved(name, "register", [checked], proof, self._table.verify)
        if checked.sole and isinstance(name, str):
            await self._until_free(normalize_path(name), checked.job)
        entry = self._table.register(name, address, key, owner, lease_s or self._lease_s,
                                     self._clock.monotonic(), checked, proof)
        for waiter in self._waiters.pop(entry.name, []):
            if not waiter.done():
                waiter.set_result(None)
        return entry.as_dict()

    async def _until_free(self, name: str, job: str) -> None:
        """Wait until no live entry of `name` is another holder's (takeover_wait)."""
        seen: dict[tuple[str, str], float] = {}
        deadline = self._clock.monotonic() + MAX_TAKEOVER_WAIT_S
        while True:
            now = self._clock.monotonic()
            wait_s = takeover_wait(name, self._table.held_against(name, job, now), seen, now,
                                   deadline)
            if wait_s <= 0:
                return
            # Woken early by an unregister or a withdrawal; else when the lease ends.
            await self._next_release(wait_s + _EXPIRY_SLACK_S)

    def _wake_released(self) -> None:
        released, self._released = self._released, []
        for waiter in released:
            if not waiter.done():
                waiter.set_result(None)

    async def unregister(self, name: str, address: str | None = None,
                         key: str | None = None, proof: str | None = None) -> int:
        """`proof`: needed for an entry a task attempt holds (holders.py)."""
        proof = check_proof(f"unregister {name!r:.200}", proof)
        removed = self._table.unregister(name, address, key, self._clock.monotonic(), proof)
        if removed:
            self._wake_released()
        return removed

    def _withdraw(self, attempts: list[str]) -> int:
        """These attempts ended: their names go now, and they may not register again. On
        the node's loop, where this actor's methods run (`withdrawer`); not a method a
        caller can reach."""
        removed = self._table.withdraw(attempts, self._clock.monotonic())
        if removed:
            self._wake_released()
        return removed

    async def ended(self, name: str, address: str, key: str, wait_s: float = 0.0) -> bool:
        """Has the actor served as `name` at (`address`, `key`) stopped: its attempt ended
        (withdrawn by the controller) or it unregistered? False while it is listed, and for
        one whose lease merely lapsed (it may be cut off, not dead). With wait_s > 0, wait
        up to that long (at most MAX_TAKEOVER_WAIT_S) for it to stop."""
        for label, value in (("name", name), ("address", address), ("key", key)):
            if not isinstance(value, str) or not value or len(value) > 1024:
                raise InvalidRequestError(f"ended: {label} must be a non-empty string of at "
                                          "most 1024 characters", label)
        if isinstance(wait_s, bool) or not isinstance(wait_s, int | float):
            raise InvalidRequestError("ended: wait_s must be a number of seconds", "wait_s")
        name = normalize_path(name)
        deadline = self._clock.monotonic() + min(max(wait_s, 0.0), MAX_TAKEOVER_WAIT_S)
        while True:
            now = self._clock.monotonic()
            if self._table.ended(name, address, key, now) or now >= deadline:
                return self._table.ended(name, address, key, now)
            await self._next_release(deadline - now)

    async def ended_of_job(self, job: str) -> list[list[str]]:
        """[name, address, key] of every endpoint `job`'s tasks held that has ended: what a
        client that killed the job stops calling at once (ClusterContext.actors_ended)."""
        if not isinstance(job, str) or not 0 < len(job) <= 1024:
            raise InvalidRequestError("ended_of_job: job must be a job id", "job")
        return [list(e) for e in self._table.ended_of_job(job, self._clock.monotonic())]

    async def _next_release(self, timeout: float) -> None:
        """Wait for the next unregister or withdrawal, or `timeout` seconds."""
        released = asyncio.get_running_loop().create_future()
        self._released.append(released)
        try:
            await asyncio.wait([released], timeout=timeout)
        finally:
            if released in self._released:
                self._released.remove(released)

    async def renew(self, owner: str, proof: str | None = None) -> int:
        """`proof`: the owner's attempt's; its held names are not renewed without it."""
        if not isinstance(owner, str):
            raise InvalidRequestError("owner: expected a string", "owner")
        proof = check_proof(f"renew {owner!r:.200}", proof)
        now = self._clock.monotonic()
        self._table.expire(now)
        return self._table.renew(owner, self._lease_s, now, proof)

    async def resolve(self, name: str, wait_s: float = 0.0, job: str | None = None
                      ) -> list[dict]:
        """Live endpoints of `name`; with wait_s > 0, wait up to that long for one to appear.
        With `job`, only the endpoints that job's tasks hold (how a spawn finds its own
        actor, not an earlier one of the same name)."""
        if job is not None and (not isinstance(job, str) or not job):
            raise InvalidRequestError("resolve: job must be a non-empty job id", "job")
        return await self._first_found([normalize_path(name)], wait_s, job)

    async def resolve_any(self, names: list[str], wait_s: float = 0.0) -> list[dict]:
        """Endpoints of the first of `names` that is registered (waiting up to wait_s for
        any of them): how a relative name is looked up through enclosing namespaces."""
        return await self._first_found([normalize_path(n) for n in names], wait_s, None)

    async def _first_found(self, names: list[str], wait_s: float, job: str | None
                           ) -> list[dict]:
        deadline = self._clock.monotonic() + min(max(wait_s, 0.0), MAX_WAIT_S)
        while True:
            now = self._clock.monotonic()
            for name in names:
                entries = [e for e in self._table.lookup(name, now)
                           if job is None or e.job == job]
                if entries:
                    return [e.as_dict() for e in entries]
            if now >= deadline:
                return []
            await self._any_registered(names, deadline - now)

    async def _any_registered(self, names: list[str], timeout: float) -> None:
        """Wait until one of `names` is registered (again), or `timeout` passes."""
        waiters = [asyncio.get_running_loop().create_future() for _ in names]
        for name, waiter in zip(names, waiters, strict=True):
            self._waiters.setdefault(name, []).append(waiter)
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for name, waiter in zip(names, waiters, strict=True):
                pending = self._waiters.get(name)
                if pending and waiter in pending:
                    pending.remove(waiter)
                    if not pending:
                        del self._waiters[name]

    async def list(self, prefix: str = "/") -> list[dict]:
        """Live entries under `prefix`; `registered_at` and `expires_at` in wall-clock epoch
        seconds (the table keeps monotonic ones, which mean nothing outside this process)."""
        now = self._clock.monotonic()
        to_wall = self._clock.wall() - now
        return [{**e.as_dict(), "registered_at": e.registered_at + to_wall,
                 "expires_at": e.expires_at + to_wall} for e in self._table.list(prefix, now)]


def withdrawer(hosted: HostedActor) -> Callable[[list[str]], None]:
    """How the controller hosted beside this registry withdraws ended attempts' names: run
    on the node's loop, in order with the registry's calls, never a call through the node's
    own address. Thread-safe; returns at once."""
    registry: Registry = hosted.instance
    return lambda attempts: hosted.node.call_in_loop(registry._withdraw, attempts)
