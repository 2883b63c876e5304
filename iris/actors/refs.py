"""ActorRef and ActorGroup: how user code calls actors. Picklable; bound to the current context.

Not the transport (node.py). `ref.method(*a, **kw)` returns an ActorFuture;
`ref.method.cast(...)` is fire and forget; `ref.method.options(timeout=...)` sets a deadline.
A ref remembers where its name resolved to; when a call fails because the actor is gone
(not found, or its peer unreachable) the ref forgets that address and the next call
resolves the name again through the registry.

A call whose peer failed (PeerUnavailableError: connection lost, or silent past the
heartbeat) asks the registry whether the actor there has stopped: its attempt ended and was
withdrawn, or it unregistered. Then the call fails with ActorDiedError, as a dead actor's
calls do in process and on Ray; otherwise (still listed, or only its lease lapsed: a peer
cut off, not known dead) with PeerUnavailableError. So does a call through a ref whose
actor died and whose name no longer resolves: ActorDiedError, not ActorNotFoundError.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from iris.actors.current import context as _context
from iris.actors.future import ActorFuture, failed
from iris.base.errors import ActorDiedError, ActorNotFoundError, PeerUnavailableError

if TYPE_CHECKING:
    from iris.actors.context import ClusterContext


class ActorRef:
    """A handle on one actor: its absolute name and (cached) where it lives."""

    __slots__ = ("name", "_address", "_key", "_methods", "_lost", "_via")

    def __init__(self, name: str, address: str | None = None, key: str | None = None):
        self.name = name
        self._address = address
        self._key = key or name
        self._methods: dict[str, _Method] = {}
        self._lost: str | None = None  # the address forgotten after a failed call
        self._via: ClusterContext | None = None  # the context of the last call sent

    @property
    def address(self) -> str | None:
        return self._address

    def __repr__(self) -> str:
        return f"ActorRef({self.name!r} at {self._address or 'unresolved'})"

    def __reduce__(self) -> tuple:
        return (ActorRef, (self.name, self._address, self._key))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ActorRef) and other.name == self.name
                and other._address == self._address and other._key == self._key)

    def __hash__(self) -> int:
        return hash((self.name, self._address, self._key))

    def __getattr__(self, method: str) -> _Method:
        if method.startswith("_"):
            raise AttributeError(method)
        bound = self._methods.get(method)
        if bound is None:
            bound = self._methods[method] = _Method(self, method, None)
        return bound

    def _call(self, method: str, args: tuple, kwargs: dict, timeout_s: float | None,
              oneway: bool) -> ActorFuture:
        ctx = _context()
        if self._address is None:
            return ctx.resolve_then(self, lambda: self._send(ctx, method, args, kwargs,
                                                             timeout_s, oneway))
        return self._send(ctx, method, args, kwargs, timeout_s, oneway)

    def _send(self, ctx: ClusterContext, method: str, args: tuple, kwargs: dict,
              timeout_s: float | None, oneway: bool) -> ActorFuture:
        self._via = ctx  # not looked up in _confirm_death: the loop thread has no context
        address = self._address
        if ctx.dead and (address, self._key) in ctx.dead:  # its job was killed from here
            killed = PeerUnavailableError("its job was killed from this process")
            self._forget_if_gone(killed)
            return failed(died(self.name, address, method, killed), actor=self.name,
                          method=method, address=address)
        fut = ctx.node.call(address, self._key, method, args, kwargs,
                            timeout_s=timeout_s, oneway=oneway)
        fut.on_unavailable = self._confirm_death
        fut.on_error = self._forget_if_gone
        error = fut.exception(0) if fut.done() else None  # failed before the hooks were set
        if error is not None:
            self._forget_if_gone(error)
        elif not oneway and ctx.node.peer_lost(address):
            # Its connection is down: if the actor has ended, say so now, not after the
            # heartbeat (a reconnect to a dead process never comes).
            ctx.actor_ended(self.name, address, self._key).add_done_callback(
                lambda asked: _yes(asked) and fut.set_exception(
                    died(self.name, address, method,
                         PeerUnavailableError("the connection to it was lost"))))
        return fut

    def _forget_if_gone(self, error: BaseException) -> None:
        if isinstance(error, ActorNotFoundError | PeerUnavailableError):
            if self._address is not None:
                self._lost = self._address
            self._address = None  # resolve again on the next call

    def _confirm_death(self, fut: ActorFuture, error: PeerUnavailableError) -> bool:
        """(future.on_unavailable) Ask the registry whether the actor at the failed address
        has stopped; complete `fut` with ActorDiedError if so, else with `error`."""
        ctx = self._via
        if ctx is None:
            return False
        name, address, key = self.name, fut.address, self._key
        ctx.actor_ended(name, address, key).add_done_callback(
            lambda asked: fut.set_exception(died(name, address, fut.method, error)
                                            if _yes(asked) else error))
        return True

    def _rebind(self, address: str, key: str) -> None:
        self._address = address
        self._key = key
        self._lost = None


def died(name: str, address: str, method: str, cause: BaseException) -> ActorDiedError:
    """The error of a call to an actor the registry knows has stopped."""
    call = f"call {name}.{method}" if method else f"call {name}"
    exc = ActorDiedError(f"{call}: the actor at {address} has died (its task ended or it "
                         f"stopped serving; {cause})", actor=name, method=method,
                         address=address)
    exc.__cause__ = cause
    return exc


def _yes(fut: ActorFuture) -> bool:
    return fut.exception() is None and fut.result() is True


class _Method:
    __slots__ = ("_ref", "_name", "_timeout")

    def __init__(self, ref: ActorRef, name: str, timeout_s: float | None):
        self._ref = ref
        self._name = name
        self._timeout = timeout_s

    def __call__(self, *args: Any, **kwargs: Any) -> ActorFuture:
        return self._ref._call(self._name, args, kwargs, self._timeout, False)

    def cast(self, *args: Any, **kwargs: Any) -> None:
        """Fire and forget: no reply, no error report (failures are logged by the actor)."""
        self._ref._call(self._name, args, kwargs, self._timeout, True)

    def options(self, *, timeout: float | None = None) -> _Method:
        """The same method with a deadline of `timeout` seconds per call."""
        return _Method(self._ref, self._name, timeout)


class ActorGroup:
    """Every replica registered under one name. `group.m(...)` goes round robin;
    `group.m.broadcast(...)` calls all and returns one future per member."""

    def __init__(self, name: str, refs: list[ActorRef]):
        self.name = name
        self.refs = list(refs)
        self._turn = itertools.count()

    def __len__(self) -> int:
        return len(self.refs)

    def __iter__(self):
        return iter(self.refs)

    def __getitem__(self, index: int) -> ActorRef:
        return self.refs[index]

    def __repr__(self) -> str:
        return f"ActorGroup({self.name!r}, {len(self.refs)} members)"

    def __reduce__(self) -> tuple:
        return (ActorGroup, (self.name, self.refs))

    def __getattr__(self, method: str) -> _GroupMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _GroupMethod(self, method)

    def _next(self) -> ActorRef:
        if not self.refs:
            raise ActorNotFoundError(f"no actor is registered as {self.name!r}", actor=self.name)
        return self.refs[next(self._turn) % len(self.refs)]


class _GroupMethod:
    __slots__ = ("_group", "_name", "_timeout")

    def __init__(self, group: ActorGroup, name: str, timeout_s: float | None = None):
        self._group = group
        self._name = name
        self._timeout = timeout_s

    def _of(self, ref: ActorRef) -> _Method:
        return _Method(ref, self._name, self._timeout)

    def __call__(self, *args: Any, **kwargs: Any) -> ActorFuture:
        return self._of(self._group._next())(*args, **kwargs)

    def cast(self, *args: Any, **kwargs: Any) -> None:
        self._of(self._group._next()).cast(*args, **kwargs)

    def options(self, *, timeout: float | None = None) -> _GroupMethod:
        """The same method with a deadline of `timeout` seconds per call."""
        return _GroupMethod(self._group, self._name, timeout)

    def broadcast(self, *args: Any, **kwargs: Any) -> list[ActorFuture]:
        """Call every member; one future each. The arguments are encoded once per member but
        their big buffers are not copied per member: sent from the caller's memory, or,
        to members on this host, copied once into shared memory that all of them map."""
        refs = self._group.refs
        if not refs or any(ref.address is None for ref in refs):
            return [self._of(ref)(*args, **kwargs) for ref in refs]
        ctx = _context()
        futs = ctx.node.call_many([(ref.address, ref._key) for ref in refs],
                                  self._name, args, kwargs, timeout_s=self._timeout)
        for ref, fut in zip(refs, futs, strict=True):
            ref._via = ctx
            fut.on_unavailable = ref._confirm_death
            fut.on_error = ref._forget_if_gone
        return futs
