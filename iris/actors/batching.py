"""Batched methods: many calls of one frequent, cheap method handled in ONE turn of the actor.

Not the mailbox or threads (hosting.py). A method marked `@batched("many")` is still called
like any other; the node's loop thread decodes and checks each call as it arrives and adds
it to the method's batch, and the actor takes the whole batch in one turn:
`instance.many(items)` gets the checked items in arrival order and returns one outcome per
item (a value, or an exception to send back as that caller's error). The replies go back to
the loop in one hand-off.

Why: a worker's report is a call a second from every host. One at a time, each cost two
cross-thread hops (the mailbox put that wakes the actor thread, the reply's post back to the
loop) plus a turn's fixed costs: ~200 us of the controller's CPU a report, the whole of a
core at 5,000 hosts. In a batch those costs are paid once per batch; under load the batch
grows by itself, because reports arrive while the actor is busy with the last one.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from iris.base.errors import IrisError, ProtocolError
from iris.wire import messages

if TYPE_CHECKING:
    from iris.actors.hosting import HostedActor

_log = logging.getLogger(__name__)


def batched(handler: str, check: Callable[..., Any] | None = None, *, late: bool = False,
            key: Callable[[Any], Any] | None = None):
    """Method decorator (sync methods only): calls of this method are handed to
    `self.<handler>(items)` in batches. `check(*args, **kwargs)` runs on the loop thread and
    returns the item (default: the (args, kwargs) pair); an IrisError it raises is that
    caller's error, sent at once, and the call never reaches the actor. `late=True`: a call
    that waited past its deadline is still handled (its caller may have given up, but what
    it says is still true), instead of refused unrun like any other call. `key(item)`: a
    call whose key matches one still waiting replaces it (the older caller is told it was
    superseded): for messages where the newest says all the older did, a behind actor does
    one item per key a turn however far behind it is, and the batch holds at most one per
    key."""
    def mark(fn):
        fn.__iris_batch__ = (handler, check, late, key)
        return fn
    return mark


class Batch:
    """The calls of one batched method waiting for the actor's next turn.

    Thread-safety without a lock: the loop thread appends and the actor thread pops (deque
    operations are atomic). `queued` says a marker for this batch is in the mailbox; the
    actor clears it *before* draining, so a call added after the drain started queues a new
    marker, and none waits for a turn that will not come.
    """

    __slots__ = ("calls", "check", "handler", "key", "keyed", "late", "lock", "method",
                 "queued")

    def __init__(self, method: str, handler: str, check: Callable[..., Any] | None,
                 late: bool = False, key: Callable[[Any], Any] | None = None):
        self.method, self.handler, self.check, self.late = method, handler, check, late
        self.calls: deque = deque()
        # Keyed batches: key -> the newest waiting call, under a lock (a dict cannot be
        # swapped out from under the loop thread's insert the way a deque is drained).
        self.key, self.keyed, self.lock = key, {}, threading.Lock()
        self.queued = False

    def __len__(self) -> int:
        return len(self.keyed) if self.key is not None else len(self.calls)

    # ------------------------------------------------------------ loop thread

    def add(self, hosted: HostedActor, rid: bytes, call: messages.Call,
            deadline: float) -> bool:
        """Decode and check one call; True if the actor must be given a turn for it."""
        try:
            args, kwargs = messages.call_arguments(call)
        except ProtocolError as exc:
            hosted._reply_error(rid, call, messages.E_PROTOCOL, str(exc))
            return False
        if self.check is None:
            item: Any = (args, kwargs)
        else:
            try:
                item = self.check(*args, **kwargs)
            except (IrisError, TypeError) as exc:  # TypeError: arguments that do not bind
                hosted._reply_exception(rid, call, exc, at_call_site=True)
                return False
        entry = (rid, call, deadline, item)
        if self.key is None:
            self.calls.append(entry)
        else:
            k = self.key(item)
            with self.lock:
                old = self.keyed.pop(k, None)  # the newest goes last: arrival order
                self.keyed[k] = entry
            if old is not None:
                hosted._reply_error(old[0], old[1], messages.E_DEADLINE,
                                    f"{hosted.key}.{self.method}: superseded by a newer call "
                                    "with the same key before it ran")
        if self.queued:
            return False
        self.queued = True
        return True

    # ------------------------------------------------------------ actor thread

    def take(self) -> list:
        self.queued = False
        if self.key is not None:
            with self.lock:
                keyed, self.keyed = self.keyed, {}
            return list(keyed.values())
        calls, out = self.calls, []
        while calls:
            out.append(calls.popleft())
        return out

    def run(self, hosted: HostedActor, now: float) -> None:
        """One turn: every call waiting, through the handler; replies in one hand-off."""
        taken = self.take()
        if not taken:
            return
        live = []
        for entry in taken:
            if now > entry[2] and not self.late:
                hosted._reply_late(entry[0], entry[1], via_post=True)
            else:
                live.append(entry)
        if not live:
            return
        try:
            outcomes = getattr(hosted.instance, self.handler)([e[3] for e in live])
            if len(outcomes) != len(live):
                raise RuntimeError(f"{self.handler} returned {len(outcomes)} outcomes for "
                                   f"{len(live)} calls")
        except Exception as exc:  # the handler failed whole: every caller hears why
            _log.exception("batch %s of actor %s raised", self.handler, hosted.key)
            outcomes = [exc] * len(live)
        replies = []
        for (rid, call, _, _), outcome in zip(live, outcomes, strict=True):
            if call.oneway:
                continue
            if isinstance(outcome, BaseException):
                frames = messages.encode_error(call.call_id, messages.E_APP, str(outcome),
                                               outcome)
            else:
                frames = hosted._encode_result(call, outcome)
            replies.append((rid, frames))
        if replies:
            hosted.node.call_in_loop(_send_all, hosted.node, replies)


def _send_all(node: Any, replies: list) -> None:
    for rid, frames in replies:
        node.send_reply(rid, frames)
