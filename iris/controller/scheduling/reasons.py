"""Why a task is still pending: a structured reason (code, message, details); not the policy.

Every pending task carries one, so `iris job status` and the API can say what blocks it
instead of leaving users to guess (the opaque "pending forever" Ray gave us).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
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


WAITS_IN_LINE = frozenset({ReasonCode.NO_CAPACITY.value, ReasonCode.SCALING_UP.value})
"""Reasons that mean "no room yet": those gain the job's place in line (queue.py)."""
AHEAD_SHOWN = 3
"""Jobs ahead named in the message; the details list up to AHEAD_LISTED, the count all."""
AHEAD_LISTED = 20


def in_line(reason: Mapping[str, object], position: int, band: str, accelerator: str,
            ahead: Sequence[tuple[str, str]]) -> dict[str, object]:
    """`reason` (a to_dict()) led by the job's place in line: "3rd in batch for
    v5litepod-16; ahead: /alice/train (64 chips), /bob/eval (16 chips): <reason>".
    `ahead`: (job id, what it asks for) of every job ahead, in line order."""
    named = ", ".join(f"{job} ({label})" for job, label in ahead[:AHEAD_SHOWN])
    more = f" and {len(ahead) - AHEAD_SHOWN} more" if len(ahead) > AHEAD_SHOWN else ""
    head = f"{ordinal(position)} in {band} for {accelerator}; " + (
        f"ahead: {named}{more}" if ahead else "nothing ahead")
    details = dict(reason.get("details") or {})  # type: ignore[call-overload]
    details["queue"] = {"position": position, "band": band, "accelerator": accelerator,
                        "ahead_count": len(ahead),
                        "ahead": [{"job_id": j, "asks": label}
                                  for j, label in ahead[:AHEAD_LISTED]]}
    return {**reason, "message": f"{head}: {reason.get('message', '')}", "details": details}


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
