"""Why a task is still pending: a structured reason (code, message, details); not the policy.

Every pending task carries one, so `iris job status` and the API can say what blocks it
instead of leaving users to guess (the opaque "pending forever" Ray gave us).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class ReasonCode(enum.StrEnum):
    NO_CAPACITY = "NO_CAPACITY"                    # nothing free of this shape anywhere
    CONSTRAINT_UNMATCHED = "CONSTRAINT_UNMATCHED"  # no worker at all satisfies a constraint
    OVER_QUOTA = "OVER_QUOTA"                      # the user's quota would be exceeded
    WAITING_FOR_GANG = "WAITING_FOR_GANG"          # gang reservation in flight / incomplete
    SCALING_UP = "SCALING_UP"                      # no room now; a region is adding hosts
    PREEMPTING = "PREEMPTING"                      # lower-band work is being evicted for it
    WORKERS_BUSY = "WORKERS_BUSY"                  # room exists but workers push back
    PREVIOUS_ATTEMPT_STOPPING = "PREVIOUS_ATTEMPT_STOPPING"  # at most one attempt at a time
    EXISTING_CAPACITY_ONLY = "EXISTING_CAPACITY_ONLY"  # no room now; it asks for no new hosts


@dataclass(frozen=True)
class PendingReason:
    code: ReasonCode
    message: str
    details: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code.value, "message": self.message, "details": dict(self.details)}
