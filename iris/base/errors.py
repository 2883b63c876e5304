"""Every exception Iris raises, in one tree.

    IrisError
    ├── ConfigError                 bad configuration (names the key and the problem)
    ├── InvalidRequestError         bad user input: names the field; nothing was changed
    │   └── UnschedulableError      a resource request no scale group can ever satisfy
    ├── NotFoundError               an unknown job, task, worker or name
    ├── ConflictError               an id or name already in use in an incompatible way
    ├── OverloadedError             not now: retry after `retry_after_s` (admission control)
    ├── StaleAttemptError           a message about an attempt that is no longer current
    ├── ProviderError               a cloud provider refused or failed
    │   └── CapacityError           stock-out or quota: try another zone or later
    ├── StorageError                the log or state store failed
    ├── ProtocolError               a malformed or unsupported message on the wire
    ├── SecurityError               keys missing or invalid; an insecure bind was refused
    ├── JobFailedError              a job ended without succeeding (job.result() raises it)
    │   └── WorkerLostError         a map input's worker died more often than its retries allow
    └── ActorCallError              a call to an actor did not return a value
        ├── ActorNotFoundError      no actor of that name at that address, or not registered
        ├── MethodNotFoundError     the actor has no public method of that name
        ├── BadArgumentsError       the arguments do not fit the method's signature
        ├── PermissionDeniedError   the method is for a role the caller does not hold
        ├── DeadlineExceededError   no reply before the call's deadline (also a TimeoutError)
        ├── PeerUnavailableError    the peer died, its connection was lost, or the node stopped
        │   └── ActorDiedError      the actor stopped while the call was queued or running
        └── RemoteError             the method raised an exception whose type could not be
                                    rebuilt here; carries its type name and traceback

An exception raised inside an actor method reaches the caller as itself (same type) when it
can be rebuilt, with the remote traceback text in `remote_traceback` and in a note; else as
RemoteError. Messages name the actor, the method and the address.
"""

from __future__ import annotations


class IrisError(Exception):
    """Root of every error Iris raises on purpose."""


class ConfigError(IrisError):
    pass


class InvalidRequestError(IrisError):
    """Bad input. `field` names what was wrong so a CLI or API can point at it."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class UnschedulableError(InvalidRequestError):
    pass


class NotFoundError(IrisError):
    pass


class ConflictError(IrisError):
    pass


class OverloadedError(IrisError):
    """Refused for load, not for content: the same request will succeed later."""

    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def __reduce__(self):  # keep retry_after_s across the wire
        return (type(self), (str(self), self.retry_after_s))


class StaleAttemptError(IrisError):
    pass


class ProviderError(IrisError):
    pass


class CapacityError(ProviderError):
    pass


class StorageError(IrisError):
    pass


class ProtocolError(IrisError):
    pass


class SecurityError(IrisError):
    pass


class JobFailedError(IrisError):
    """`status` is the job's final status dict (tasks, errors) as the controller reported it."""

    def __init__(self, message: str, status: dict | None = None):
        super().__init__(message)
        self.status = status or {}


class WorkerLostError(JobFailedError):
    """iris.map: the worker running input `index` died (preempted, killed) on every try."""

    def __init__(self, message: str, index: int = -1):
        super().__init__(message)
        self.index = index


class ActorCallError(IrisError):
    """A call did not return a value. `actor`, `method` and `address` say which call."""

    def __init__(self, message: str, *, actor: str = "", method: str = "", address: str = ""):
        super().__init__(message)
        self.actor = actor
        self.method = method
        self.address = address


class ActorNotFoundError(ActorCallError):
    pass


class MethodNotFoundError(ActorCallError):
    pass


class BadArgumentsError(ActorCallError, TypeError):
    pass


class PermissionDeniedError(ActorCallError, PermissionError):
    """A control-plane method called by a peer without its role (e.g. a client calling a
    worker-only method). Nothing was changed."""


class DeadlineExceededError(ActorCallError, TimeoutError):
    pass


class PeerUnavailableError(ActorCallError):
    pass


class ActorDiedError(PeerUnavailableError):
    pass


class RemoteError(ActorCallError):
    """An exception from an actor whose type could not be rebuilt at the caller."""

    def __init__(self, message: str, *, remote_type: str = "", remote_traceback: str = "", **kw):
        super().__init__(message, **kw)
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback

    @classmethod
    def unpicklable(cls, raised: str, text: str, why: str, traceback: str = "") -> RemoteError:
        """A task's exception of type `raised` that cannot travel as a pickle (it holds a
        lock, or its __init__ wants other arguments than its args): its type and text. The
        same words on every backend (the worker's task runtime, the in-process child)."""
        return cls(f"the task raised {raised}: {text} (the exception itself cannot travel as "
                   f"a pickle: {why})", remote_type=raised, remote_traceback=traceback)

    def __str__(self) -> str:
        text = super().__str__()
        if self.remote_traceback:
            text += "\n\nRemote traceback:\n" + self.remote_traceback
        return text


__all__ = [name for name, obj in dict(globals()).items() if isinstance(obj, type)
           and issubclass(obj, IrisError)]
