"""The gang allocation messages between the coordinator and a region's ledger; data only.

Two-phase: the coordinator sends ReserveRequest to several regions at once; each answers
Reserved (a hold on whole hosts that lapses at `expires_at` unless committed) or Refused.
The coordinator sends CommitRequest to the best offer and AbortRequest to the others, and
ReleaseRequest when the gang ends. Every request is idempotent, and keyed by
(gang_id, attempt) so a retry, a duplicate or a late message can never hold a host twice.
Abort is keyed by attempt, not token, so an attempt whose offer was lost can still be
aborted. A region actor wraps `ReservationLedger.handle`; a controller actor wraps
`GangCoordinator.handle`; the wire layer carries these as plain msgpack-able fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from iris.controller.scheduling.model import GangShape


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
    expires_at: float  # the region's monotonic clock; informational for the coordinator


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
