"""Job trees kept together: "run in the same zone (or region) as job X", resolved at placement.

Pure: a spec's `colocate` request and where X's attempts run in, a constraint or a pending
reason out. Not the scheduler (it just sees one more constraint).

A sub-job asks `colocate="zone"` to run in its parent's zone, so the parts of a job tree
that talk every step do not cross zones (cross-zone traffic is slower and billed). Any job
may name another with `colocate_with`: a CPU coordinator follows its accelerator job,
wherever that landed. The zones are those of X's attempts that are assigned or running;
while X has none (pending, or between attempts) the follower waits, and its pending
reason says for what. Settled at each placement: a follower already running stays where it
is when X moves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from iris.base.errors import InvalidRequestError
from iris.base.ids import join_path
from iris.controller.scheduling.constraints import Constraint, Op

SCOPES = ("zone", "region")
WAITING_CODE = "WAITING_FOR_COLOCATED_JOB"


def parse(scope: str | None, target: str | None, user: str, parent: str | None
          ) -> dict[str, str] | None:
    """{"scope": "zone"|"region", "job": absolute id} from a submission's `colocate` and
    `colocate_with` (a job id, or a name relative to the parent or the user), or None."""
    if scope is None and target is None:
        return None
    if scope is None:
        scope = "zone"
    if scope not in SCOPES:
        raise InvalidRequestError(f"colocate: expected 'zone' or 'region', got {scope!r}",
                                  "colocate")
    if target is None:
        if parent is None:
            raise InvalidRequestError("colocate: a root job has no parent to run beside; "
                                      "name the job to follow with colocate_with",
                                      "colocate_with")
        return {"scope": scope, "job": parent}
    if not isinstance(target, str) or not target:
        raise InvalidRequestError(f"colocate_with: expected a job id, got {target!r}",
                                  "colocate_with")
    try:
        return {"scope": scope, "job": join_path(parent or f"/{user}", target)}
    except ValueError as exc:
        raise InvalidRequestError(f"colocate_with: {exc}", "colocate_with") from exc


def resolve(colocate: Mapping[str, str], placed_in: Collection[str], ended: bool = False
            ) -> Constraint | dict[str, Any]:
    """The constraint that keeps a follower beside its job (`placed_in`: the zones or
    regions, per the scope, of that job's live attempts), or the reason it waits (`ended`:
    that job finished or is gone, so it will never be placed again)."""
    scope, job = colocate["scope"], colocate["job"]
    if ended:
        return {"code": WAITING_CODE,
                "message": f"{job} has ended: this job runs in the same {scope} as it "
                           "(colocate), so it cannot be placed; kill it and submit again",
                "details": {"colocate_with": job, "scope": scope, "ended": True}}
    if not placed_in:
        return {"code": WAITING_CODE,
                "message": f"waiting for {job} to be placed: this job runs in the same "
                           f"{scope} as it (colocate)",
                "details": {"colocate_with": job, "scope": scope}}
    return Constraint(scope, Op.IN, frozenset(placed_in))
