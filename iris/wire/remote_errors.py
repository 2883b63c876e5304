"""Turning an ERROR message back into the exception the caller raises.

Not the encoding side (messages.encode_error). An application exception is rebuilt with its
own type when its pickle loads here, with the remote traceback attached as a note and as
`remote_traceback`; otherwise it becomes a RemoteError that carries the type name and text.
So does a remote SystemExit, KeyboardInterrupt or other BaseException that is not an
Exception: raised as itself it would end the caller (an actor's sys.exit() exited the
program that called it, past its `except Exception`).
"""

from __future__ import annotations

import pickle

from iris.base import errors
from iris.wire import messages

_CODE_TO_ERROR = {
    messages.E_ACTOR_NOT_FOUND: errors.ActorNotFoundError,
    messages.E_METHOD_NOT_FOUND: errors.MethodNotFoundError,
    messages.E_BAD_ARGUMENTS: errors.BadArgumentsError,
    messages.E_DEADLINE: errors.DeadlineExceededError,
    messages.E_ACTOR_DIED: errors.ActorDiedError,
    messages.E_PROTOCOL: errors.ProtocolError,
    messages.E_PERMISSION: errors.PermissionDeniedError,
}


def error_from(code: str, message: str, detail: dict, *, actor: str, method: str,
               address: str, unpickle: bool = True) -> BaseException:
    """The exception an ERROR stands for. `unpickle=False` (a reply from a peer this node
    does not trust with code: a worker answering the controller) never loads
    `detail.pickled`: an Iris error named by `detail.type` is rebuilt from its message,
    anything else is a RemoteError."""
    where = dict(actor=actor, method=method, address=address)
    if code != messages.E_APP:
        cls = _CODE_TO_ERROR.get(code, errors.RemoteError)
        if cls is errors.ProtocolError:
            return errors.ProtocolError(f"{address} refused {actor}.{method}: {message}")
        return cls(message, **where)
    remote_tb = detail.get("traceback") if isinstance(detail.get("traceback"), str) else ""
    remote_type = detail.get("type") if isinstance(detail.get("type"), str) else "Exception"
    exc = (_unpickle_exception(detail.get("pickled")) if unpickle
           else _iris_error(remote_type, message))
    header = f"Remote traceback ({actor}.{method} at {address}):\n"
    if exc is None:
        return errors.RemoteError(f"{actor}.{method} at {address} raised {remote_type}: {message}",
                                  remote_type=remote_type, remote_traceback=remote_tb, **where)
    try:
        exc.remote_traceback = remote_tb
    except AttributeError:  # an exception type with __slots__: the note still carries it
        pass
    exc.add_note(header + remote_tb.rstrip())
    return exc


def _unpickle_exception(blob: object) -> BaseException | None:
    if not isinstance(blob, bytes):
        return None
    try:
        exc = pickle.loads(blob)
    except Exception:  # its class is not importable here, or its __init__ wants other args
        return None
    return exc if isinstance(exc, Exception) else None


def _iris_error(qualified: str, message: str) -> Exception | None:
    """An error of iris.base.errors named `qualified`, made from its message alone; None
    for any other type (nothing is imported or unpickled on a peer's word)."""
    module, _, name = qualified.rpartition(".")
    cls = getattr(errors, name, None) if module == errors.__name__ else None
    if not (isinstance(cls, type) and issubclass(cls, errors.IrisError)):
        return None
    try:
        return cls(message)
    except Exception:
        return None
