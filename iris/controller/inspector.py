"""The controller's inspector, `/iris/inspect`: where a user looks inside a live task. Stacks,
profiles, exec sessions and named ports, each passed on to the inspector beside the task's
worker (worker/inspector.py). An actor of its own in the controller's process.

Not the Controller actor: a profile takes its seconds and an exec runs as long as its
command, and neither may hold the controller's thread. Every method here is async on the
node's loop; what it needs of the controller's state (which attempt, on which worker; may
this user exec; the exec written into the job's events) it asks the Controller actor in
process (`inspect_target`, on the controller's own turn), so that state is read only there.

Exec sessions are named by a random id the caller holds (128 bits: holding it is the right
to read its output); this actor keeps which worker runs each, at most MAX_SESSIONS, each
forgotten once its exit code was delivered or after IDLE_S without a poll. The worker keeps
(and bounds) the processes and their output.
"""

from __future__ import annotations

import secrets
from typing import Any

from iris.actors import Node, actor, tokens
from iris.actors.hosting import requires
from iris.actors.keys import (
    CONTROLLER_KEY,
    worker_inspect_key,
)
from iris.base.errors import InvalidRequestError, NotFoundError, OverloadedError
from iris.wire import control

# The controller answers `inspect_target` from its turn: milliseconds, or seconds when busy.
_TARGET_TIMEOUT_S = 30.0
_STACK_TIMEOUT_S = 60.0  # py-spy answers in well under a second per process
_PROFILE_SLACK_S = 60.0  # a profile's call outlives the profile by this much
_POLL_SLACK_S = 30.0
MAX_SESSIONS = 1024  # sessions this controller routes at once (workers hold 16 each)
IDLE_S = 600.0  # a route unused this long is forgotten (the worker gave up after 60 s)


@actor(max_concurrency=512)
class Inspector:
    def __init__(self, node: Node):
        self._node = node
        # session -> (address, key, the worker's command token, at)
        self._routes: dict[str, tuple[str, str, bytes | None, float]] = {}

    async def _target(self, raw: dict) -> dict:
        node = self._node
        return await node.call(node.address, CONTROLLER_KEY, "inspect_target", (raw,),
                               timeout_s=_TARGET_TIMEOUT_S)

    async def _worker(self, address: str, key: str, auth: bytes | None, method: str,
                      *args: Any, timeout_s: float) -> Any:
        """`auth`: the worker's command token, as the controller's `inspect_target` gave it
        (credentials.py: new at each join, so never derived here)."""
        return await self._node.call(address, key, method, args, timeout_s=timeout_s,
                                     auth=auth)

    async def task_stack(self, raw: dict) -> dict:
        """Every thread's Python stack of the task's processes (`iris task stack`)."""
        ref = control.decode(control.TaskRef, raw)
        target = await self._target({**control.encode(ref), "kind": "stack"})
        began = self._node.clock.monotonic()
        got = await self._worker(target["address"], worker_inspect_key(target["worker_id"]),
                                 target["auth"], "stack", target["attempt_id"], timeout_s=_STACK_TIMEOUT_S)
        took = round(self._node.clock.monotonic() - began, 3)
        return {**_about(target), **got, "took_s": took}

    async def task_profile(self, raw: dict) -> dict:
        """A sampling profile of the live task, folded stacks (`iris task profile`)."""
        req = control.decode(control.ProfileRequest, raw)
        target = await self._target({"job_id": req.job_id, "task_index": req.task_index,
                                     "kind": "profile"})
        ask = control.encode(control.ProfileRequest(target["attempt_id"], req.task_index,
                                                    req.seconds, req.rate))
        got = await self._worker(target["address"], worker_inspect_key(target["worker_id"]),
                                 target["auth"], "profile", ask, timeout_s=req.seconds + _PROFILE_SLACK_S)
        return {**_about(target), **got}

    async def task_exec(self, raw: dict) -> dict:
        """Run a command in the task's environment, as the job's owner (`iris task exec`);
        answers the session to poll. Recorded in the job's events."""
        return await self._exec(raw, operator=False)

    @requires(tokens.ADMIN)
    async def task_exec_as_operator(self, raw: dict) -> dict:
        """The same for an operator (the admin token), into anyone's job."""
        return await self._exec(raw, operator=True)

    async def _exec(self, raw: dict, operator: bool) -> dict:
        req = control.decode(control.ExecRequest, raw)
        if not req.argv:
            raise InvalidRequestError("argv: give the command to run, e.g. -- python -V",
                                      "argv")
        self._sweep()
        if len(self._routes) >= MAX_SESSIONS:
            raise OverloadedError(f"{MAX_SESSIONS} exec sessions are open: retry later",
                                  retry_after_s=5.0)
        target = await self._target({"job_id": req.job_id, "task_index": req.task_index,
                                     "kind": "exec", "user": req.user, "operator": operator,
                                     "argv": list(req.argv)})
        session = secrets.token_hex(16)
        key = worker_inspect_key(target["worker_id"])
        await self._worker(target["address"], key, target["auth"], "exec_start",
                           control.encode(control.ExecStart(target["attempt_id"], session,
                                                            req.argv)), timeout_s=30.0)
        self._routes[session] = (target["address"], key, target["auth"],
                                 self._node.clock.monotonic())
        return {**_about(target), "session": session}

    async def exec_poll(self, raw: dict) -> dict:
        """An exec session's output after `cursor` (waiting up to `wait_s` for some), and
        its exit code once it ended and everything before it was delivered."""
        req = control.decode(control.ExecPoll, raw)
        address, key, auth, _ = self._route(req.session)
        self._routes[req.session] = (address, key, auth, self._node.clock.monotonic())
        try:
            got = await self._worker(address, key, auth, "exec_poll", control.encode(req),
                                     timeout_s=req.wait_s + _POLL_SLACK_S)
        except NotFoundError:  # the worker collected it (idle, or its task ended)
            self._routes.pop(req.session, None)
            raise
        if got.get("exit_code") is not None:
            self._routes.pop(req.session, None)
            await self._worker(address, key, auth, "exec_end", req.session, timeout_s=30.0)
        return got

    async def exec_end(self, session: str) -> None:
        """Stop an exec session's command (Ctrl-C at `iris task exec`)."""
        address, key, auth, _ = self._route(session)
        self._routes.pop(session, None)
        await self._worker(address, key, auth, "exec_end", session, timeout_s=30.0)

    async def task_url(self, raw: dict) -> dict:
        """Where a task's named port listens: {host, port, url} (`iris job url`)."""
        if not isinstance(raw, dict):
            raise InvalidRequestError("expected {job_id, task_index, port}", "raw")
        ref = control.decode(control.TaskRef, {k: v for k, v in raw.items() if k != "port"})
        target = await self._target({**control.encode(ref), "kind": "url",
                                     "port": raw.get("port")})
        host = target["address"].split("//")[-1].rsplit(":", 1)[0]
        shown = f"[{host}]" if ":" in host else host
        return {**_about(target), "port_name": raw.get("port"), "host": host,
                "port": target["port"], "url": f"http://{shown}:{target['port']}/"}

    def _route(self, session: Any) -> tuple[str, str, bytes | None, float]:
        if not isinstance(session, str) or session not in self._routes:
            raise NotFoundError(f"no exec session {str(session)[:40]!r} (it ended, or was "
                                "idle too long)")
        return self._routes[session]

    def _sweep(self) -> None:
        cutoff = self._node.clock.monotonic() - IDLE_S
        for session in [s for s, (*_, at) in self._routes.items() if at < cutoff]:
            del self._routes[session]


def _about(target: dict) -> dict:
    return {k: target[k] for k in ("job_id", "task_index", "attempt_id", "worker_id")}
