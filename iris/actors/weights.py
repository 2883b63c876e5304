"""Weight versions from one trainer to many rollouts: the trainer publishes, rollouts get.

Not a parameter server: one publisher per name, versions only go up, nothing is merged.

    pub = Publisher("policy")                 # trainer: serves "policy"
    version = pub.publish({"w": array, ...})  # pushed to every subscriber at once

    sub = Subscriber("policy")                # rollout: serves a replica of "/policy.rollouts"
    version, weights = sub.get(max_stale=1)   # newest, or at most 1 version behind

- publish() pushes to every live subscriber. To subscribers on this host the weights are
  copied once into shared memory that all of them map (group.receive.broadcast). Those on
  other hosts (or all of them, with IRIS_SHM_MIN_BYTES=0) get them down a chain (relay.py)
  on the bulk path (bulk.py): the version is sealed once, in chunks of `chunk_bytes`, with
  a key of its own handed to each subscriber over CURVE; the first subscriber pulls the
  chunks from the trainer and each next one from the one before, which passes them on as
  they arrived while it opens its own copy, with at most credits x streams chunks asked
  for per link (BulkConfig). A subscriber that dies fails its own delivery only
  (last_failures): the one above it attaches the one below, which pulls what it lacks.
- get(max_stale=K) returns at once when the held version is at most K behind the newest
  published; otherwise it waits for the push already under way, with no polling: one
  pending call to the publisher (`settled`) answers when that push is over. If the
  publisher dies meanwhile, that call fails (peer liveness: within ~3.5 s) and get() raises
  PeerUnavailableError instead of hanging. A subscriber that joined after the last push,
  or whose delivery failed, fetches the newest version directly.
- Without the copy: `w = pub.buffers(layout)` gives writable arrays in shared memory laid
  out for the next version; fill them in place, then `pub.publish(w)`: to subscribers on
  this host that is a version flip (no copy; weights_buffers.py says how versions rotate
  so that none is torn). Arrays filled but not published are never sent.
- Received arrays are read-only views of the message; copy one to change it.
- The publisher keeps a reference to the newest weights (for late joiners): do not change
  them in place after publishing; publish new arrays (or copies). Arrays from buffers()
  turn read-only once published.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from iris.actors import relay
from iris.actors.actor_spec import actor
from iris.actors.current import context as _context
from iris.actors.current import current_context
from iris.actors.refs import ActorGroup, ActorRef
from iris.actors.weights_buffers import Buffers, parse_layout
from iris.base.errors import IrisError

_ROLLOUTS = ".rollouts"
# How long one push may take before it counts as failed for a subscriber (s): 1 GiB at a
# slow 0.1 GB/s, with room to spare.
PUSH_TIMEOUT_S = 120.0


@actor
class _PublisherActor:
    def __init__(self) -> None:
        self.version = 0
        self.weights: Any = None
        self.settled_version = 0  # every push up to this version is over (ok or failed)
        self._waiters: list[tuple[int, asyncio.Future]] = []

    def latest(self) -> int:
        return self.version

    def fetch(self) -> list:
        """[version, weights] of the newest version (for a subscriber that missed it)."""
        return [self.version, self.weights]

    async def settled(self, version: int) -> int:
        """Answers once the push of `version` (or a later one) is over."""
        if self.settled_version >= version:
            return self.settled_version
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((version, waiter))
        return await waiter

    def _settle(self, version: int) -> None:  # on the node's loop thread
        self.settled_version = max(self.settled_version, version)
        keep = []
        for wanted, waiter in self._waiters:
            if wanted <= self.settled_version and not waiter.done():
                waiter.set_result(self.settled_version)
            elif not waiter.done():
                keep.append((wanted, waiter))
        self._waiters = keep


@actor
class _SubscriberActor:
    def __init__(self, box: _Box, node: Any) -> None:
        self._box = box
        self._node = node
        self._transfers = relay.Transfers(node, self._hold)

    def receive(self, version: int, weights: Any, via: str = "") -> None:
        """Hold `weights` (same host: views of the publisher's shared memory)."""
        self._box.put(version, weights, via)

    async def attach(self, meta: dict, chain: list, via: str, grant: list) -> int:
        """A chained push starts (or resumes, from a new sender above): pull it with
        `grant` (its sender's bulk endpoint and the version's key; relay.py); answers
        how many chunks are held."""
        return self._transfers.attach(meta, chain, via, grant)

    async def finish(self, tid: str) -> dict:
        """Once held and passed on: {address: why} of the chain below not reached."""
        return await self._transfers.finish(tid)

    def _hold(self, meta: dict, value: Any, via: str) -> None:
        self._box.put(meta["version"], value, via)

    def on_stop(self) -> None:  # partial copies go with the subscriber (on the loop)
        self._node.call_in_loop(self._transfers.close)


class _Box:
    """The newest weights a subscriber holds, and a condition to wait for newer ones."""

    def __init__(self) -> None:
        self.version = 0
        self.weights: Any = None
        self.via = ""  # the address it came from: the publisher, or a forwarding subscriber
        self.cond = threading.Condition()

    def put(self, version: int, weights: Any, via: str = "") -> None:
        with self.cond:
            if version > self.version:
                self.version, self.weights, self.via = version, weights, via
            self.cond.notify_all()

    def wake(self, _: Any = None) -> None:
        with self.cond:
            self.cond.notify_all()


class Publisher:
    """The trainer's side: serves `name` in this process; publish() pushes a new version."""

    def __init__(self, name: str, *, size_hint: int = 0,
                 chunk_bytes: int = relay.CHUNK_BYTES) -> None:
        """`size_hint`: the weights' size in bytes, if known: shared memory for them is made
        and faulted in now, on a thread of its own, so the first publish() to this host is
        a memcpy, not page faults (1 GiB: ~1.5 s of faults on this VM). `chunk_bytes`: the
        unit of the chained push to other hosts (relay.py; 1 byte to 64 MiB)."""
        for label, value, low in (("size_hint", size_hint, 0), ("chunk_bytes", chunk_bytes, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{label} must be an int >= {low}, got {value!r}")
        if chunk_bytes > relay.MAX_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes must be at most {relay.MAX_CHUNK_BYTES}, got "
                             f"{chunk_bytes}")
        self.name = name
        self._chunk = chunk_bytes
        self._ctx = _context()
        self._ref = self._ctx.serve(_PublisherActor, name)
        self._state: _PublisherActor = self._ctx.node._actors[self._ref._key].instance
        # Subscribers register next to the publisher's absolute name, wherever their own
        # namespace is (a rollout task lives in its job's tree, the trainer in the client's).
        self._rollouts = self._ref.name + _ROLLOUTS
        self.last_failures: dict = {}  # of the last publish(wait=True): address -> why
        node = self._ctx.node
        self._buffers = Buffers(node._pool, node.now)
        if node._shm_min and size_hint >= node._shm_min:
            # Two: subscribers hold one version's segment while the next is filled.
            node._pool.warm(size_hint, count=2)

    @property
    def version(self) -> int:
        return self._state.version

    def buffers(self, layout: dict | None = None) -> dict:
        """{name: writable numpy array} in shared memory for the next version: fill them,
        then publish() them; to subscribers on this host that sends no copy. `layout`:
        {name: array} or {name: (shape, dtype)}; None: the layout of the last call. Call
        it again for each version (the arrays of a published one turn read-only); a call
        before publishing hands the same memory out again, its contents undefined."""
        parsed = None if layout is None else parse_layout(layout)
        state = self._state
        return self._buffers.hand_out(parsed, state.version + 1, state.settled_version)

    def publish(self, weights: Any, wait: bool = True) -> int:
        with _bound(self._ctx):
            return self._publish(weights, wait)

    def _publish(self, weights: Any, wait: bool) -> int:
        """Push `weights` as the next version to every subscriber; returns the version.

        With `wait` (the default) returns when every subscriber holds it, or failed; the
        failures are in `last_failures` (subscriber address -> error). Without, returns at
        once and the push goes on (a newer publish does not cancel it)."""
        state = self._state
        group = self._ctx.resolve_all(self._rollouts)
        self._buffers.adopt(weights, state.version + 1)
        version = state.version + 1
        state.version, state.weights = version, weights
        node = self._ctx.node
        # Near: shared memory (or this very process); far: the chunked chain (relay.py).
        near = [r for r in group.refs
                if r.address == node.address or node._shares_with(r.address)]
        far = [[r.address, r._key] for r in group.refs if r not in near]
        sent = ActorGroup(group.name, near).receive.options(timeout=PUSH_TIMEOUT_S).broadcast(
            version, weights, node.address)
        futs: list = list(sent)
        chain = None
        if far:
            source = relay.Source(node, f"{node.id}{self._ref.name}@{version}", weights,
                                  self._chunk, {"version": version})
            chain = asyncio.run_coroutine_threadsafe(relay.relay(node, source, far), node.loop)
            futs.append(chain)
        self._settle_when_done(version, futs)
        if wait:
            failed = {fut.address: repr(fut.exception()) for fut in sent if fut.exception()}
            self.last_failures = {**failed, **(chain.result() if chain else {})}
        return version

    def _settle_when_done(self, version: int, futs: list) -> None:
        node, state = self._ctx.node, self._state
        left = [len(futs)]

        def one_done(_: Any) -> None:
            left[0] -= 1
            if left[0] == 0:
                node.call_in_loop(state._settle, version)

        if not futs:
            node.call_in_loop(state._settle, version)
        for fut in futs:
            fut.add_done_callback(one_done)

    def close(self) -> None:
        self._ctx.unserve(self.name)
        self._buffers.close()


class Subscriber:
    """A rollout's side: serves a replica of `name`.rollouts; get() returns held weights."""

    def __init__(self, name: str, timeout: float = 60.0) -> None:
        """Waits up to `timeout` s for the publisher `name` to be registered."""
        self.name = name
        self._ctx = _context()
        self._box = _Box()
        self._publisher: ActorRef = self._ctx.resolve(name, timeout=timeout)
        self._rollouts = self._publisher.name + _ROLLOUTS
        self._ctx.serve(_SubscriberActor, self._rollouts, self._box, self._ctx.node)

    @property
    def version(self) -> int:
        return self._box.version

    def get(self, max_stale: int = 0, timeout: float = 300.0) -> tuple[int, Any]:
        """(version, weights): the newest published, or one at most `max_stale` versions
        older. Waits for a push under way (no polling); raises PeerUnavailableError if the
        publisher dies first, TimeoutError after `timeout` seconds."""
        if isinstance(max_stale, bool) or not isinstance(max_stale, int) or max_stale < 0:
            raise ValueError(f"max_stale must be an int >= 0, got {max_stale!r}")
        with _bound(self._ctx):
            return self._get(max_stale, timeout)

    def _get(self, max_stale: int, timeout: float) -> tuple[int, Any]:
        newest = self._publisher.latest().result(timeout)
        need = max(newest - max_stale, 1)
        box = self._box
        if box.version < need:
            settled = self._publisher.settled.options(timeout=timeout)(need)
            settled.add_done_callback(box.wake)
            with box.cond:
                box.cond.wait_for(lambda: box.version >= need or settled.done(), timeout)
            if box.version < need:
                settled.result(0)  # raises why: the publisher died, or the deadline passed
                self._fetch(need, timeout)
        with box.cond:
            return box.version, box.weights

    def _fetch(self, need: int, timeout: float) -> None:
        version, weights = self._publisher.fetch().result(timeout)
        if version < need:
            raise IrisError(f"publisher {self.name!r} is at version {version}, below "
                            f"the {need} asked for")
        self._box.put(version, weights)

    def close(self) -> None:
        self._ctx.unserve(self._rollouts)


@contextlib.contextmanager
def _bound(ctx: Any):
    """Make `ctx` current for the calls inside (get() may run in any thread)."""
    token = current_context.set(ctx)
    try:
        yield
    finally:
        current_context.reset(token)
