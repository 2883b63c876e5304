"""Admission: whether a request may run at all, decided from its header alone (its role,
its actor and method, its payload's format and size), and the words of each refusal.

Not running what is let in (hosting.py), nor the roles' secrets (tokens.py). A HostedActor
asks `refusal` as a call is dispatched; the node's Gate asks the same questions earlier,
before it decodes a big header, fetches a call's frames on the bulk path or opens the
shared-memory segment a call names, so a caller refused anyway costs none of that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from iris.actors import tokens
from iris.actors.actor_spec import INTERNAL, ActorSpec
from iris.wire import codec, messages

# Actors served under this prefix are the control plane (controller, inspector, registry,
# regions, workers and their inspectors: actors/keys.py). They take plain msgpack arguments
# only: a pickle is code, and loading one from a peer ran any command in the controller or
# a worker for any local process, token or none (issue 26's roles then meant nothing).
CONTROL_PLANE_PREFIX = "/iris/"
# ...except from this process, and from the controller (its own token at its node and its
# report fronts', its command token at a worker): a report front hands the controller its
# checked reports as typed messages, pickled.
MAY_PICKLE = frozenset({INTERNAL, tokens.CONTROLLER})
# The largest header a control-plane call may have (but from those roles): a report of 4,096
# updates is ~1 MiB, and big bytes travel as buffer frames. Decoding a header builds its
# objects: one 50 MB header frame of small ints took a node to a 460 MB peak (1 GiB frames
# are allowed: ~9 GiB), before any role was checked.
MAX_CONTROL_HEADER_BYTES = 16 << 20


def header_refusal(key: str, address: str, plain_only: bool, size: int,
                   role: str) -> str | None:
    """Why a call whose header is `size` bytes is refused before it is decoded."""
    if plain_only and size > MAX_CONTROL_HEADER_BYTES and role not in MAY_PICKLE:
        return (f"{key} at {address}: a control-plane call's header is at most "
                f"{MAX_CONTROL_HEADER_BYTES} bytes, this one {size} (refused undecoded; big "
                "bytes travel as buffer frames)")
    return None


def refusal(spec: ActorSpec, key: str, address: str, plain_only: bool,
            call: messages.Call) -> tuple[str, str] | None:
    """(error code, message) if `call` may not run at the actor served under `key` whatever
    its arguments: no such method, a role the method does not name, a pickle to the
    control plane."""
    if call.method not in spec.methods:
        known = ", ".join(sorted(spec.methods)) or "none"
        return messages.E_METHOD_NOT_FOUND, (
            f"actor {key!r} at {address} has no method {call.method!r} (public methods: "
            f"{known})")
    if call.method in spec.roles and not permitted(spec, call):
        return messages.E_PERMISSION, _denied(spec, key, address, call)
    if plain_only and call.fmt != codec.FORMAT_MSGPACK and call.role not in MAY_PICKLE:
        return messages.E_PROTOCOL, _pickled(key, address, call)
    return None


def permitted(spec: ActorSpec, call: messages.Call) -> bool:
    """The caller holds a role the method names; a credential that names one peer (a
    worker's) may only speak as that peer: the call's first argument must be its id."""
    if call.role == INTERNAL:
        return True
    return call.role in spec.roles[call.method] and (
        call.principal is None or named_in(call) == call.principal)


class Gate:
    """A node's admission before it decodes, fetches or maps anything (loop thread). It
    reads the node's own tables: `actors` (key -> HostedActor) and `grants` (token ->
    (role, principal)); `answer(rid, frames)` sends a reply."""

    _CLIENT = ("client", None)  # the role of a call whose auth this node does not know

    def __init__(self, actors: dict, grants: dict, answer: Callable[[Any, list], None],
                 stats: Any):
        self._actors, self._grants, self._answer, self._stats = actors, grants, answer, stats

    def with_role(self, call: messages.Call, role: str | None) -> messages.Call:
        """The call, its role (and whom its credential names) set: `role` as given (an
        in-process call's), else from its auth token."""
        if role is not None:
            call.role = role
        elif call.auth:
            call.role, call.principal = self._grants.get(call.auth, self._CLIENT)
        return call

    def refused_undecoded(self, rid: Any, header: bytes) -> bool:
        """A header too big for the actor it names (header_refusal): refused, counted as
        malformed, and a CALL answered why, without building its objects."""
        target = messages.peek_target(header)
        hosted = self._actors.get(target[2]) if target is not None else None
        if hosted is None:
            return False  # decoded as any other: its errors are named there
        kind, call_id, _, auth = target
        role = self._grants.get(auth, self._CLIENT)[0] if auth else "client"
        why = hosted.header_refusal(len(header), role)
        if why is None:
            return False
        self._stats.malformed += 1
        if kind == messages.CALL:
            self._answer(rid, messages.encode_error(call_id, messages.E_PROTOCOL, why))
        return True

    def refused_unfetched(self, rid: Any, header: bytes, role: str | None,
                          address: str) -> bool:
        """A call whose big frames wait on the bulk path or in shared memory, refused (and
        answered) before any is fetched or mapped if it could not run anyway: no such actor
        or method, or a caller the method refuses. Fetched first, a caller with no token
        made the node connect to an endpoint it named and hold what it sent there for as
        long as its call's timeout, or open another process's segment (read-write: it
        marks its slot) that the caller named."""
        call = messages.peek_route(header)
        if call is None:
            return False  # the fetch refuses it, naming why
        call = self.with_role(call, role)
        hosted = self._actors.get(call.actor)
        refused = ((messages.E_ACTOR_NOT_FOUND, f"no actor {call.actor!r} at {address}")
                   if hosted is None else hosted.refusal(call))
        if refused is None:
            return False
        self._stats.calls_received += 1
        if not call.oneway:
            self._answer(rid, messages.encode_error(call.call_id, *refused))
        return True


def named_in(call: messages.Call) -> Any:
    """The id a call speaks for: its first argument (or `worker_id=`), read without
    unpickling: a call with a credential that names its holder must be plain msgpack."""
    if call.fmt != codec.FORMAT_MSGPACK:
        return None
    payload = call.payload
    if type(payload) not in (list, tuple) or len(payload) != 2:
        return None
    args, kwargs = payload
    if type(args) in (list, tuple) and args:
        return args[0]
    return kwargs.get("worker_id") if type(kwargs) is dict else None


def _pickled(key: str, address: str, call: messages.Call) -> str:
    return (f"{key}.{call.method} at {address} takes plain msgpack "
            "arguments only (a control-plane actor never unpickles what a peer sends); this "
            "call's payload is a pickle, refused unread: send lists, dicts, str, int, float, "
            "bytes, bool or None")


def _denied(spec: ActorSpec, key: str, address: str, call: messages.Call) -> str:
    allowed = sorted(spec.roles[call.method]) or ["this process itself"]
    where = f"{key}.{call.method} at {address}"
    if call.role == tokens.REVOKED:
        return (f"{where}: the credential of worker {call.principal!r} was revoked and "
                "this caller presents it (the worker left, was lost, or an operator revoked "
                "it; a worker joins again with the cluster token): not permitted")
    if call.role in allowed and call.principal is not None:
        return (f"{where}: a {call.role} may speak only as itself; this caller is "
                f"{call.principal!r} and the call names {named_in(call)!r:.80} (not permitted)")
    unknown = (" presenting a token not known here (issued before this node restarted, "
               "revoked, or never issued)") if call.auth and call.role == "client" else ""
    return (f"{where} is for {' or '.join(allowed)} only; this caller is a {call.role}"
            f"{unknown} (not permitted)")
