"""Hosting actors: one live actor instance inside a node.

Not the class as declared (actor_spec.py: `@actor`, `@requires`, `ActorSpec`; their names
are re-exported here), nor routing or sockets (node.py). A hosted actor has its own thread:
sync methods run there one at a time, so a blocking method never stalls the node's loop or
other actors. `async def` methods run on the node's loop, at most `max_concurrency` at once.
Hooks, all on the actor's thread: `on_start()` after construction, `on_tick()` every
`tick_interval_s` seconds (a class attribute) between calls, and `on_stop()` at shutdown.
Calls still queued when the actor stops are answered with ActorDiedError.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections import deque
from collections.abc import Callable
from queue import Empty
from typing import TYPE_CHECKING, Any

from iris.actors import admission, wakers
from iris.actors.actor_spec import INTERNAL as INTERNAL  # re-exported: stable names
from iris.actors.actor_spec import ActorSpec as ActorSpec
from iris.actors.actor_spec import actor as actor
from iris.actors.actor_spec import requires as requires
from iris.actors.actor_spec import spec_of as spec_of
from iris.actors.batching import Batch
from iris.actors.current import current_context
from iris.actors.log_budget import LogBudget, left_out
from iris.base.errors import OverloadedError, ProtocolError
from iris.base.histogram import Histogram
from iris.wire import messages

if TYPE_CHECKING:
    from iris.actors.node import Node

_log = logging.getLogger(__name__)
_STOP = object()


class HostedActor:
    """One actor instance served by a node under `key` (its registered absolute name)."""

    def __init__(self, node: Node, key: str, spec: ActorSpec, args: tuple, kwargs: dict,
                 cluster: Any = None):
        self.node = node
        self.key = key
        self.spec = spec
        self.instance: Any = None
        self._cluster = cluster
        self._queue = wakers.Mailbox()
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._stopping = False
        self._max_async = spec.max_concurrency or node.config.default_max_concurrency
        self._max_waiting = node.config.max_waiting_calls  # read per call: kept here
        self._async_running = 0
        self._async_waiting: deque = deque()
        self._async_tasks: set[asyncio.Task] = set()
        self._batches = {m: Batch(m, *how) for m, how in spec.batches.items()}
        self.plain_only = key.startswith(admission.CONTROL_PLANE_PREFIX)
        self._cast_log = LogBudget()  # casts refused or raising: no caller to tell
        # How long calls take to handle here (arguments decoded to reply encoded), one
        # histogram per thread that writes it: sync methods on the actor thread, async ones
        # on the loop. Node.served_latency() merges them.
        self.handled_sync = Histogram()
        self.handled_async = Histogram()
        self._thread = threading.Thread(target=self._main, args=(args, kwargs), daemon=True,
                                        name=f"iris-actor-{key}")

    def start(self) -> None:
        """Construct the instance on its thread and run on_start; re-raise their errors."""
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error

    def stop(self, wait: bool = True) -> None:
        """Refuse new calls and calls not yet started; then (with `wait`) join the thread."""
        if not self._stopping:
            self._stopping = True
            self._queue.put(_STOP)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def post(self, fn: Callable, *args: Any) -> bool:
        """Run fn(*args) as a turn of this actor, in mailbox order (any thread): how a reply
        to a call the actor made, or work it handed to an executor, comes back as a message
        instead of touching its state from another thread. False once it is stopping."""
        if self._stopping:
            return False
        self._queue.put(_Posted(fn, args))
        return True

    def backlog(self) -> int:
        """Calls and messages waiting in the mailbox now (approximate: others may be adding).
        An actor can batch work while more is queued behind the current turn."""
        return self._queue.qsize()

    # ------------------------------------------------------------ loop thread

    def header_refusal(self, size: int, role: str) -> str | None:
        """Why a call whose header is `size` bytes is refused here before it is decoded."""
        return admission.header_refusal(self.key, self.node.address, self.plain_only, size,
                                        role)

    def refusal(self, call: messages.Call) -> tuple[str, str] | None:
        """(error code, message) if this call may not run here whatever its arguments
        (admission.refusal): asked before its big frames are fetched too."""
        return admission.refusal(self.spec, self.key, self.node.address, self.plain_only, call)

    def dispatch(self, rid: bytes, call: messages.Call, deadline: float) -> None:
        is_async = self.spec.methods.get(call.method)
        refused = self.refusal(call)
        if refused is not None:
            self._reply_error(rid, call, *refused)
        elif self._stopping:
            self._reply_died(rid, call)
        elif self._full(call.method, is_async):
            self._refuse_overloaded(rid, call)
        elif call.method in self._batches:
            batch = self._batches[call.method]
            # The turn is queued at once, not after this drain of the socket: under a flood
            # the drain does not end, and a batch waiting for it went past its callers'
            # deadlines (a livelock at 2,000 hosts). It grows while the actor is busy.
            if batch.add(self, rid, call, deadline):
                self._queue.put(batch, self.node.defer_wakes)
        elif not is_async:
            self._queue.put((rid, call, deadline), self.node.defer_wakes)
        elif self._async_running < self._max_async:
            self._start_async(rid, call, deadline)
        else:
            self._async_waiting.append((rid, call, deadline))

    def _full(self, method: str, is_async: bool) -> bool:
        """Does the line this call would join hold max_waiting_calls already?"""
        limit = self._max_waiting
        if method in self._batches:
            return len(self._batches[method]) >= limit
        if is_async:
            return self._async_running >= self._max_async and len(self._async_waiting) >= limit
        return self._queue.qsize() >= limit

    def _refuse_overloaded(self, rid: bytes, call: messages.Call) -> None:
        self.node.stats.refused_overloaded += 1
        self._reply_exception(rid, call, OverloadedError(
            f"actor {self.key!r} at {self.node.address} has "
            f"{self._max_waiting} calls waiting; {call.method!r} refused "
            "unrun: retry later", retry_after_s=1.0), at_call_site=False)

    def _start_async(self, rid: bytes, call: messages.Call, deadline: float) -> None:
        self._async_running += 1
        task = self.node.loop.create_task(self._run_async(rid, call, deadline))
        self._async_tasks.add(task)
        task.add_done_callback(self._async_done)

    def _async_done(self, task: asyncio.Task) -> None:
        self._async_tasks.discard(task)
        self._async_running -= 1
        if self._async_waiting and not self._stopping:
            self._start_async(*self._async_waiting.popleft())

    async def _run_async(self, rid: bytes, call: messages.Call, deadline: float) -> None:
        started = self.node.now()
        if started > deadline:
            return self._reply_late(rid, call)
        try:  # one coroutine frame per call: the finally times it without a wrapper
            try:
                args, kwargs = messages.call_arguments(call)
            except ProtocolError as exc:
                return self._reply_error(rid, call, messages.E_PROTOCOL, str(exc))
            try:
                coro = getattr(self.instance, call.method)(*args, **kwargs)
            except BaseException as exc:
                return self._reply_exception(rid, call, exc, at_call_site=True)
            try:
                result = await coro
            except asyncio.CancelledError:
                self._reply_died(rid, call)
                raise
            except BaseException as exc:
                return self._reply_exception(rid, call, exc, at_call_site=False)
            if not call.oneway:
                self.node.send_reply(rid, self._encode_result(call, result))
        finally:
            self.handled_async.observe(self.node.now() - started)

    # ------------------------------------------------------------ actor thread

    def _main(self, args: tuple, kwargs: dict) -> None:
        current_context.set(self._cluster)
        try:
            self.instance = self.spec.cls(*args, **kwargs)
            self._run_hook("on_start")
        except BaseException as exc:
            self._start_error = exc
            self._started.set()
            return
        self._started.set()
        for item in self._mailbox():
            if type(item) is _Posted:
                self._run_posted(item)
            elif type(item) is Batch:
                self._run_batch(item)
            elif self._stopping:  # stop requested: calls that have not started never will
                self._reply_died(item[0], item[1], via_post=True)
            else:
                self._run_sync(*item)
        queue = self._queue
        while not queue.empty():  # calls that arrived before the stop: they never ran
            item = queue.get()
            if item is not _STOP and type(item) not in (_Posted, Batch):
                self._reply_died(item[0], item[1], via_post=True)
        for batch in self._batches.values():
            for rid, call, _, _ in batch.take():
                self._reply_died(rid, call, via_post=True)
        self._cancel_async()
        try:
            self._run_hook("on_stop")
        except Exception:
            _log.exception("on_stop of actor %s raised", self.key)

    def _mailbox(self):
        """Calls from the queue until stop, running on_tick whenever its interval is due."""
        queue = self._queue
        tick = getattr(self.instance, "on_tick", None)
        interval = getattr(self.instance, "tick_interval_s", None)
        if tick is None or not interval:
            while (item := queue.get()) is not _STOP:
                yield item
            return
        clock = self.node.clock
        due = clock.monotonic() + interval
        while True:
            wait = due - clock.monotonic()
            if wait <= 0:
                try:
                    tick()
                except Exception:
                    _log.exception("on_tick of actor %s raised", self.key)
                due = clock.monotonic() + interval
                continue
            try:
                item = queue.get(timeout=wait)
            except Empty:
                continue
            if item is _STOP:
                return
            yield item

    def _run_posted(self, item: _Posted) -> None:
        if self._stopping:
            return
        try:
            item.fn(*item.args)
        except Exception:  # like on_tick: one bad message must not end the actor
            _log.exception("posted message %s to actor %s raised", item.fn, self.key)

    def _run_batch(self, batch: Batch) -> None:
        if self._stopping:
            for rid, call, _, _ in batch.take():
                self._reply_died(rid, call, via_post=True)
            return
        started = self.node.now()
        try:
            batch.run(self, started)
        finally:
            self.handled_sync.observe(self.node.now() - started)

    def _run_hook(self, name: str) -> None:
        hook = getattr(self.instance, name, None)
        if hook is None:
            return
        if inspect.iscoroutinefunction(hook):
            asyncio.run_coroutine_threadsafe(hook(), self.node.loop).result()
        else:
            hook()

    def _run_sync(self, rid: bytes, call: messages.Call, deadline: float) -> None:
        started = self.node.now()
        if started > deadline:
            return self._reply_late(rid, call, via_post=True)
        try:
            frames = self._handle_sync(rid, call)
        finally:
            self.handled_sync.observe(self.node.now() - started)
        if frames is not None:  # idle: nothing queued, so this thread sleeps next
            self.node.post_reply(rid, frames, idle=self._queue.empty())

    def _handle_sync(self, rid: bytes, call: messages.Call) -> list | None:
        """The reply's frames, or None when there is none to send or it went already (an
        error). Sent by the caller after its bookkeeping: the reply is the last thing this
        thread does before it sleeps, so the loop it wakes finds the GIL free."""
        try:
            args, kwargs = messages.call_arguments(call)
        except ProtocolError as exc:
            return self._reply_error(rid, call, messages.E_PROTOCOL, str(exc), via_post=True)
        method = getattr(self.instance, call.method)
        try:
            result = method(*args, **kwargs)
        except BaseException as exc:
            return self._reply_exception(rid, call, exc, at_call_site=True, via_post=True)
        return None if call.oneway else self._encode_result(call, result)

    def _cancel_async(self) -> None:
        def cancel_all() -> None:
            for task in list(self._async_tasks):
                task.cancel()
            while self._async_waiting:
                rid, call, _ = self._async_waiting.popleft()
                self._reply_died(rid, call)

        if not self.node.loop.is_closed():
            self.node.call_in_loop(cancel_all)

    # ------------------------------------------------------------ replies

    def _encode_result(self, call: messages.Call, result: Any) -> list:
        try:
            return messages.encode_reply(call.call_id, result)
        except Exception as exc:
            return messages.encode_error(
                call.call_id, messages.E_APP,
                f"{self.key}.{call.method} returned a value that cannot be sent: {exc}", exc)

    def _reply_exception(self, rid: bytes, call: messages.Call, exc: BaseException,
                         at_call_site: bool, via_post: bool = False) -> None:
        # A TypeError raised by the call itself (no frame of the method on the traceback)
        # means the arguments did not bind: report it as such, naming the signature.
        if (at_call_site and isinstance(exc, TypeError) and exc.__traceback__ is not None
                and exc.__traceback__.tb_next is None):
            method = getattr(self.instance, call.method)
            message = (f"{self.key}.{call.method}{inspect.signature(method)} at "
                       f"{self.node.address}: {exc}")
            return self._reply_error(rid, call, messages.E_BAD_ARGUMENTS, message, via_post)
        if call.oneway:
            self._log_cast("cast %s.%s raised %r", call, repr(exc)[:500])
            return None
        frames = messages.encode_error(call.call_id, messages.E_APP, str(exc), exc)
        self._send(rid, frames, via_post)

    def _reply_late(self, rid: bytes, call: messages.Call, via_post: bool = False) -> None:
        self._reply_error(rid, call, messages.E_DEADLINE,
                          f"{self.key}.{call.method} at {self.node.address} waited in the "
                          "actor's queue past its deadline and was not run", via_post)

    def _reply_died(self, rid: bytes, call: messages.Call, via_post: bool = False) -> None:
        self._reply_error(rid, call, messages.E_ACTOR_DIED,
                          f"actor {self.key!r} at {self.node.address} stopped before "
                          f"{call.method!r} ran", via_post)

    def _reply_error(self, rid: bytes, call: messages.Call, code: str, message: str,
                     via_post: bool = False) -> None:
        if call.oneway:
            self._log_cast("dropped cast %s.%s: %s", call, message)
            return
        self._send(rid, messages.encode_error(call.call_id, code, message), via_post)

    def _log_cast(self, fmt: str, call: messages.Call, why: str) -> None:
        skipped = self._cast_log.take(self.node.now())
        if skipped is not None:
            _log.warning(fmt + "%s", self.key, call.method[:200], why, left_out(skipped))

    def _send(self, rid: bytes, frames: list, via_post: bool) -> None:
        if via_post:
            self.node.post_reply(rid, frames)
        else:
            self.node.send_reply(rid, frames)


class _Posted:
    """A message an actor posted to itself (HostedActor.post)."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable, args: tuple):
        self.fn, self.args = fn, args
