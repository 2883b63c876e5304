"""The gang allocation messages between the controller's gangs object and a region's
ledger; data only.

Two-phase: the gangs object (tracking.GangTracker) sends ReserveRequest to several regions at once; each answers
Reserved (a hold on whole hosts that lapses at `expires_at` unless committed) or Refused.
It sends CommitRequest to the best offer and AbortRequest to the others, and
ReleaseRequest when the gang ends. Every request is idempotent, and keyed by
(gang_id, attempt) so a retry, a duplicate or a late message can never hold a host twice.
Abort is keyed by attempt, not token, so an attempt whose offer was lost can still be
aborted. A region actor wraps `ReservationLedger.handle`; the controller's service holds
the GangTracker. `SendRegion` is one batch of requests for one region.

A Region actor the controller's node hosts is handed these types as they are
(`Region.handle_requests`); only one in another process gets frames. On the wire each
message is its fields as plain data (wire/schema.py `encode`, the shape's
constraints included) plus "type", its class name; `decode_message` checks a peer's dict
completely with the same schema as every control message, and a malformed one raises
ProtocolError naming the field (never pickle: a peer's bytes are never unpickled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from iris.base.errors import InvalidRequestError, ProtocolError
from iris.controller.scheduling.model import GangShape
from iris.wire.schema import decode, encode


@dataclass(frozen=True, slots=True)
class ReserveRequest:
    gang_id: str
    attempt: int
    shape: GangShape
    lease_s: float  # how long the hold lives without a commit, seconds


@dataclass(frozen=True, slots=True)
class CommitRequest:
    gang_id: str
    attempt: int
    token: str


@dataclass(frozen=True, slots=True)
class AbortRequest:
    gang_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class ReleaseRequest:
    gang_id: str
    token: str


@dataclass(frozen=True, slots=True)
class Reserved:
    region: str
    gang_id: str
    attempt: int
    token: str
    hosts: tuple[str, ...]
    expires_at: float  # the region's monotonic clock; informational for the controller


@dataclass(frozen=True, slots=True)
class Refused:
    region: str
    gang_id: str
    attempt: int
    code: str  # NO_CAPACITY, CONSTRAINT_UNMATCHED, ABORTED, EXPIRED, INVALID, ...
    reason: str


@dataclass(frozen=True, slots=True)
class Committed:
    region: str
    gang_id: str
    attempt: int
    token: str
    hosts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CommitRefused:
    region: str
    gang_id: str
    attempt: int
    token: str
    code: str  # EXPIRED, ABORTED, UNKNOWN_TOKEN, RELEASED
    reason: str


@dataclass(frozen=True, slots=True)
class Released:
    region: str
    gang_id: str
    token: str


RegionRequest = ReserveRequest | CommitRequest | AbortRequest | ReleaseRequest
RegionReply = Reserved | Refused | Committed | CommitRefused | Released


@dataclass(frozen=True, slots=True)
class SendRegion:
    """Typed requests for one region's ledger, in order (frames only for a Region actor in
    another process); replies come back as `GangTracker.replied`, failure as `region_down`."""

    region: str
    requests: tuple[RegionRequest, ...]


_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    ReserveRequest, CommitRequest, AbortRequest, ReleaseRequest,
    Reserved, Refused, Committed, CommitRefused, Released)}


def encode_message(msg: RegionRequest | RegionReply) -> dict[str, Any]:
    """The plain-data form of a gang message: its fields and "type"."""
    if type(msg).__name__ not in _TYPES:
        raise ProtocolError(f"not a gang protocol message: {type(msg).__name__}")
    return {"type": type(msg).__name__, **encode(msg)}


def decode_message(data: Any) -> RegionRequest | RegionReply:
    """The gang message a peer sent, checked whole, or ProtocolError naming the field."""
    cls = _TYPES.get(data.get("type")) if isinstance(data, dict) else None
    if cls is None:
        raise ProtocolError(f"gang message: unknown or missing 'type' in {data!r:.200}")
    try:
        return decode(cls, {k: v for k, v in data.items() if k != "type"}, cls.__name__)
    except InvalidRequestError as exc:  # a shape's own check (hosts >= 1) included
        raise ProtocolError(f"{cls.__name__}: {exc}") from exc
