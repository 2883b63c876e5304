"""ClusterContext: this process's membership in one cluster — its node, the registry, a namespace.

Not how a cluster is started (that is iris.client). The context serves actors (host +
register + keep the lease alive), resolves names, and is what `iris.resolve` and refs use
through the `current_context` ContextVar. Relative names live in the context's namespace
(the job tree, e.g. `/alice/rl`); names starting with `/` are absolute.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

from iris.actors.config import NodeConfig
from iris.actors.current import context as _context
from iris.actors.current import current_context, in_task, set_joiner
from iris.actors.future import ActorFuture
from iris.actors.holders import holder_from_env, proof_from_env
from iris.actors.node import Node
from iris.actors.refs import ActorGroup, ActorRef, died
from iris.actors.registry import LEASE_S, REGISTRY_KEY, RENEW_INTERVAL_S
from iris.actors.security import Security
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import (
    ActorCallError,
    ActorNotFoundError,
    BadArgumentsError,
    ConfigError,
    PeerUnavailableError,
    StaleAttemptError,
)
from iris.base.ids import join_path, parent_path

_log = logging.getLogger(__name__)
# Registry calls made on a caller's behalf (register, resolve) fail after this long.
_REGISTRY_TIMEOUT_S = 30.0
# A lookup whose registry is unreachable (its controller restarting) is tried again after
# 0.2 s, doubling to 2 s, until the lookup's own timeout: as clients wait for the controller
# (iris/client/retry.py). Before, iris.resolve failed in 3 s during a restart.
_FIRST_BACKOFF_S, _MAX_BACKOFF_S = 0.2, 2.0
# A failed call waits this long at most, past _DEATH_NEWS_S, for the registry to say whether
# its actor died: the registry is on the controller's node, a round trip (ms) away; one
# silent this long (cut off too) cannot tell, and the call fails with the error it had.
_ENDED_TIMEOUT_S = 1.0
# How long a failed call waits for the registry to hear its actor ended: a worker reports
# its task's exit within ~0.1 s and the controller withdraws its names at once, so a call
# that failed the moment its actor was SIGKILLed ("connection lost") can still say so. A
# peer merely cut off costs its caller this much more before PeerUnavailableError.
_DEATH_NEWS_S = 1.0
# Actors of a killed job are refused here for this long: past the stop's grace (10 s by
# default, SIGTERM to SIGKILL), after which their processes are gone anyway.
_DEAD_KEEP_S = 120.0
_MAX_DEAD = 10_000

_ADDRESS = re.compile(r"^(tcp://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):\d{1,5}|(ipc|inproc)://\S+)$")


def current() -> ClusterContext:
    return _context()


def security_from_env(security: Security | None = None) -> Security | None:
    """`security` if given, else the keys named by $IRIS_KEYS_DIR, else None (loopback)."""
    if security is None and os.environ.get("IRIS_KEYS_DIR"):
        return Security.load(os.environ["IRIS_KEYS_DIR"])
    return security


def join(address: str | None = None, *, namespace: str | None = None, bind: str | None = None,
         security: Security | None = None) -> ClusterContext:
    """A new node in this process, member of the cluster at `address` ($IRIS_ADDRESS)."""
    address = address or os.environ.get("IRIS_ADDRESS")
    if not address:
        raise ConfigError("no cluster address: pass one or set $IRIS_ADDRESS")
    check_address(address, "cluster address")
    bind = bind or os.environ.get("IRIS_BIND") or "tcp://127.0.0.1:0"
    node = Node(NodeConfig(bind=bind), security=security_from_env(security)).start()
    return ClusterContext(node, address, namespace or os.environ.get("IRIS_NAMESPACE") or "/",
                          owns_node=True)


def check_address(address: str, what: str) -> str:
    """`address` if it is one a node can connect to; else ConfigError naming `what` (each
    call to an address that is not would be retried until its deadline)."""
    if not isinstance(address, str) or not _ADDRESS.match(address):
        raise ConfigError(f"{what} {address!r}: expected tcp://HOST:PORT (or ipc://PATH), "
                          "e.g. tcp://127.0.0.1:5555")
    return address


class ClusterContext:
    def __init__(self, node: Node, registry_address: str, namespace: str = "/",
                 owns_node: bool = False):
        self.node = node
        self.address = registry_address
        self.namespace = namespace
        self._owns_node = owns_node
        self._served: dict[str, str] = {}  # absolute name -> key in this node
        # The task attempt this process runs as (None outside a task): the registry drops
        # its names when the controller ends that attempt.
        self._holder = holder_from_env(os.environ)
        # Its proof (holders.py): the registry keeps its names to it. None from a
        # controller that gave none; then none is sent.
        self._proof = proof_from_env(os.environ) if self._holder else None
        self._old_proofs = False  # a registry from before proofs: learnt as _old_registry
        # A registry from before holders (same protocol version) refuses the holder and
        # resolve's job argument: learnt at the first refusal, then neither is sent.
        self._old_registry = False
        self._sole: set[str] = set()  # names served as a spawned actor's (serve_spawned)
        # (address, key) -> until when: actors this process was told had ended (the job it
        # killed), refused here at once (refs.py); by then the process may still answer.
        self.dead: dict[tuple[str, str], float] = {}
        self._tokens: list = []
        self._closed = False
        node.cluster = self
        node.call_in_loop(current_context.set, self)  # async methods see this context too
        node.call_in_loop(self._schedule_renewal)

    def _registry(self, method: str, *args: Any,
                  timeout_s: float = _REGISTRY_TIMEOUT_S) -> ActorFuture:
        """Call the registry through this context's node (whichever context is current)."""
        return self.node.call(self.address, REGISTRY_KEY, method, args, timeout_s=timeout_s)

    # ------------------------------------------------------------ names

    def full_name(self, name: str) -> str:
        return join_path(self.namespace, name)

    def scope(self, name: str) -> list[str]:
        """Where a name is looked up: itself if absolute, else the namespace and each
        enclosing one up to the root (a task finds its job tree's actors, then its
        client's)."""
        if name.startswith("/"):
            return [join_path("/", name)]
        names, namespace = [], self.namespace or "/"
        while True:
            names.append(join_path(namespace, name))
            if namespace == "/":
                return names
            namespace = parent_path(namespace)

    def serve(self, cls: type, name: str, *args: Any, **kwargs: Any) -> ActorRef:
        """Host an instance of `cls` in this process and register it as `name`."""
        return self._serve(cls, name, args, kwargs, sole=False)

    def serve_spawned(self, cls: type, name: str, args: tuple = ()) -> ActorRef:
        """As serve, for the actor `iris.spawn` started: inside a task, the name is that job's
        alone, so a later spawn's job serving it hides this one (holders.py)."""
        return self._serve(cls, name, args, {}, sole=True)

    def _serve(self, cls: type, name: str, args: tuple, kwargs: dict, sole: bool) -> ActorRef:
        full = self.full_name(name)
        self.node.host(full, cls, args, kwargs)
        holder = self._holder_of(full, sole)
        try:
            self._register_now(full, holder)
        except BaseException:
            self.node.unhost(full)
            raise
        self._served[full] = full
        return ActorRef(full, self.node.address, full)

    def _proved(self) -> tuple:
        """The proof argument of register, unregister and renew: none to an old registry."""
        return (self._proof,) if self._proof and not (self._old_registry or self._old_proofs) \
            else ()

    def _register_now(self, full: str, holder: dict | None) -> None:
        args = (full, self.node.address, full, self.node.id, None)
        if holder is not None and self._proved():
            try:
                self._registry("register", *args, holder, *self._proved()).result()
                return
            except BadArgumentsError:  # a registry from before proofs (same protocol)
                self._old_proofs = True
        if holder is not None:
            try:
                self._registry("register", *args, holder).result()
                return
            except BadArgumentsError:  # a registry from before holders (same protocol)
                self._old_registry = True
        self._registry("register", *args).result()

    def _holder_of(self, full: str, sole: bool | None = None) -> dict | None:
        """The holder `full` is registered with (remembering `sole` when given)."""
        if sole is not None:
            (self._sole.add if sole else self._sole.discard)(full)
        if self._holder is None or self._old_registry:
            return None
        return {**self._holder, "sole": True} if full in self._sole else self._holder

    def unserve(self, name: str) -> None:
        full = self.full_name(name)
        self._sole.discard(full)
        if self._served.pop(full, None) is not None:
            self._registry("unregister", full, self.node.address, full,
                           *self._proved()).result()
            self.node.unhost(full)

    def resolve(self, name: str, timeout: float = 30.0) -> ActorRef:
        """A ref to `name`, waiting up to `timeout` seconds for it to be registered."""
        endpoints = self._lookup(name, timeout)
        if not endpoints:
            tried = " or ".join(repr(n) for n in self.scope(name))
            raise ActorNotFoundError(
                f"no actor registered as {tried} after waiting {timeout} s "
                f"(registry at {self.address})", actor=name, address=self.address)
        first = endpoints[0]
        return ActorRef(first["name"], first["address"], first["key"])

    def resolve_all(self, name: str, timeout: float = 0.0, job: str | None = None
                    ) -> ActorGroup:
        """Every live replica of `name` (waiting up to `timeout` s for at least one); with
        `job`, only those that job's tasks serve (`name` is then taken as given, not looked
        up through enclosing namespaces)."""
        endpoints = self._lookup(name, timeout, job)
        full = endpoints[0]["name"] if endpoints else self.full_name(name)
        return ActorGroup(full, [ActorRef(full, e["address"], e["key"]) for e in endpoints])

    def _lookup(self, name: str, timeout: float, job: str | None = None) -> list[dict]:
        """`_lookup_once`, riding through a registry that is down or not yet serving until
        `timeout` has passed, saying once on stderr what it waits for."""
        clock = SYSTEM_CLOCK
        deadline = clock.monotonic() + timeout
        backoff, told, pause = _FIRST_BACKOFF_S, False, threading.Event()
        while True:
            try:
                return self._lookup_once(name, max(deadline - clock.monotonic(), 0.0), job)
            except (PeerUnavailableError, ActorNotFoundError) as exc:
                down = isinstance(exc, PeerUnavailableError) or exc.actor == REGISTRY_KEY
                if not down or clock.monotonic() + backoff >= deadline:
                    raise
                if not told:
                    print(f"iris: waiting for the registry at {self.address} to resolve "
                          f"{name!r} ({type(exc).__name__}: {str(exc).splitlines()[0]})",
                          file=sys.stderr, flush=True)
                    told = True
            pause.wait(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _lookup_once(self, name: str, timeout: float, job: str | None = None) -> list[dict]:
        if job is not None and not self._old_registry:
            try:
                return self._registry("resolve", self.full_name(name), timeout, job,
                                      timeout_s=timeout + _REGISTRY_TIMEOUT_S).result()
            except BadArgumentsError:  # a registry from before holders: any holder's entry
                self._old_registry = True
        return self._registry("resolve_any", self.scope(name), timeout,
                              timeout_s=timeout + _REGISTRY_TIMEOUT_S).result()

    def actor_ended(self, name: str, address: str, key: str) -> ActorFuture:
        """Whether the registry knows the actor served as `name` at (`address`, `key`) has
        stopped (registry.ended), waiting up to _DEATH_NEWS_S to hear it; False from a
        registry that cannot say (older, or unreachable: then nothing is known)."""
        asked = self._registry("ended", name, address, key, _DEATH_NEWS_S,
                               timeout_s=_DEATH_NEWS_S + _ENDED_TIMEOUT_S)
        answer = ActorFuture(name, "(ended)", self.address)
        asked.add_done_callback(lambda f: answer.set_result(
            f.exception() is None and f.result() is True))
        return answer

    def actors_ended(self, job: str) -> None:
        """`job` was killed: calls from here to the actors its tasks served fail at once
        with ActorDiedError (the kill's answer came before their processes stopped). Kept
        _DEAD_KEEP_S, past any stop's grace; best effort: an older registry cannot say."""
        try:
            ended = self._registry("ended_of_job", job).result()
        except ActorCallError:  # an older registry, or none reachable: calls find out
            return
        now = SYSTEM_CLOCK.monotonic()
        dead = self.dead
        for expired in [k for k, until in list(dead.items()) if until <= now]:
            dead.pop(expired, None)
        for _, address, key in ended[:_MAX_DEAD]:
            dead[(address, key)] = now + _DEAD_KEEP_S

    def list_actors(self, prefix: str = "/") -> list[dict]:
        return self._registry("list", prefix).result()

    def resolve_then(self, ref: ActorRef, send: Callable[[], ActorFuture]) -> ActorFuture:
        """Resolve `ref` again, then `send()`; never blocks (works on the loop thread too)."""
        outer = ActorFuture(ref.name, "(resolve)", self.address)

        def resolved(fut: ActorFuture) -> None:
            error = fut.exception()
            if error is None and not fut.result():
                error = ActorNotFoundError(f"no actor registered as {ref.name!r} "
                                           f"(registry at {self.address})", actor=ref.name)
                if ref._lost is not None:  # the ref's actor was there: has it died?
                    lost = ref._lost
                    self.actor_ended(ref.name, lost, ref._key).add_done_callback(
                        lambda asked: outer.set_exception(
                            died(ref.name, lost, "", error) if asked.result()
                            else error))
                    return
            if error is not None:
                outer.set_exception(error)
                return
            ref._rebind(fut.result()[0]["address"], fut.result()[0]["key"])
            inner = send()
            inner.add_done_callback(lambda f: _forward(f, outer))

        self._registry("resolve", ref.name, 0.0).add_done_callback(resolved)
        return outer

    # ------------------------------------------------------------ leases

    def _schedule_renewal(self) -> None:
        if not self._closed:
            self.node.loop.call_later(RENEW_INTERVAL_S, self._renew)

    def _renew(self) -> None:
        if self._closed:
            return
        if self._served:
            self._registry("renew", self.node.id, *self._proved(),
                           timeout_s=LEASE_S).add_done_callback(
                self._renewed)
        self._schedule_renewal()

    def _renewed(self, fut: ActorFuture) -> None:
        if fut.exception() is not None:
            _log.warning("lease renewal failed: %s", fut.exception())
            return
        if fut.result() < len(self._served):  # the registry lost us (restart, or a long stall)
            for full, key in list(self._served.items()):
                holder = self._holder_of(full)
                self._registry("register", full, self.node.address, key, self.node.id, None,
                               holder, *(self._proved() if holder else ())).add_done_callback(
                    lambda f, full=full: self._registered_again(full, f))

    def _registered_again(self, full: str, fut: ActorFuture) -> None:
        error = fut.exception()
        if isinstance(error, StaleAttemptError):  # this attempt was ended: its names went
            if self._served.pop(full, None) is not None:
                _log.info("%s is no longer registered: %s", full, error)
        elif error is not None:
            _log.warning("registering %s again failed: %s", full, error)

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for full in list(self._served):
            try:
                self._registry("unregister", full, self.node.address, full,
                               *self._proved(), timeout_s=2.0).result()
            except Exception:  # the registry may already be gone; the lease covers it
                pass
        self._served.clear()
        if self._owns_node:
            self.node.stop()

    def __enter__(self) -> ClusterContext:
        self._tokens.append(current_context.set(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        current_context.reset(self._tokens.pop())
        self.close()


def join_task() -> ClusterContext | None:
    """Inside a task, a new membership in its cluster; elsewhere None."""
    return join() if in_task() else None


set_joiner(join_task)


def _forward(src: ActorFuture, dst: ActorFuture) -> None:
    error = src.exception()
    if error is not None:
        dst.set_exception(error)
    else:
        dst.set_result(src.result())
