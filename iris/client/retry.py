"""Client calls to the controller that ride through its restarts. Not the calls themselves.

While the controller starts, restarts or is briefly unreachable, a call fails with
PeerUnavailableError (the connection dropped, or the peer was silent 3 s) or
ActorNotFoundError for /iris/controller (its port is open before the actor is served). Every
controller method a client calls is safe to repeat: reads, `kill` (a killed job stays
killed), `put_bundle` (content-addressed) and `submit` (idempotent by its request id, which
the client always sets). So the call is repeated, with capped backoff, until the caller's
deadline, and one line on stderr says what it waits for.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from iris.actors import ClusterContext, Node
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import ActorNotFoundError, PeerUnavailableError

# First retry after 0.2 s, doubling to 2 s: a restart takes a second or two, and a client
# waiting for it should notice within a couple of seconds of the controller's return.
_FIRST_BACKOFF_S, _MAX_BACKOFF_S = 0.2, 2.0


def _retryable(exc: BaseException, key: str) -> bool:
    if isinstance(exc, ActorNotFoundError):
        return exc.actor == key  # not served yet: starting up
    return isinstance(exc, PeerUnavailableError)


def ask_controller(ctx: ClusterContext, method: str, *args: Any,
                   timeout_s: float = 60.0, retry_s: float | None = None) -> Any:
    """Call the controller of `ctx`, riding through its restarts until `timeout_s`."""
    return call_controller(ctx.node, ctx.address, method, args, timeout_s=timeout_s,
                           retry_s=retry_s)


def call_controller(node: Node, address: str, method: str, args: tuple = (), *,
                    timeout_s: float = 60.0, retry_s: float | None = None,
                    auth: bytes | None = None, key: str = CONTROLLER_KEY) -> Any:
    """`key`: another actor of the controller's process (its inspector, INSPECT_KEY).
    `retry_s` (at most `timeout_s`, the default): how long an unreachable controller is
    tried again; a call that reached it may still take until `timeout_s` to be answered
    (a caller's own deadline, with room for a reply that is late on a loaded host)."""
    clock = SYSTEM_CLOCK
    deadline = clock.monotonic() + timeout_s
    retry_until = deadline if retry_s is None else min(clock.monotonic() + retry_s, deadline)
    backoff, told = _FIRST_BACKOFF_S, False
    pause = threading.Event()  # never set: a timed wait without a bare sleep
    while True:
        remaining = deadline - clock.monotonic()
        try:
            return node.call(address, key, method, args,
                             timeout_s=max(remaining, 0.05), auth=auth).result()
        except (PeerUnavailableError, ActorNotFoundError) as exc:
            if not _retryable(exc, key) or clock.monotonic() + backoff >= retry_until:
                raise
            if not told:
                print(f"iris: waiting for the controller at {address} ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0]}); retrying {method} for up to "
                      f"{retry_until - clock.monotonic():.0f} s", file=sys.stderr, flush=True)
                told = True
            pause.wait(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)
