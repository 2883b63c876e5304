"""Accelerator fallbacks and budget demotion as the scheduler shows them; not the placement.

A job asking `tpu="v6e-4,v5litepod-4"` is tried on each alternative in order, within one
pass (scheduler.py). This module holds what that needs besides placement: the per-job
list of alternatives, the reason that names each alternative and why it does not fit, and
the note added to the reasons of a user demoted to batch for being over budget.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence

from iris.base.resources import Resources
from iris.controller.scheduling.constraints import Constraint
from iris.controller.scheduling.model import TaskDemand
from iris.controller.scheduling.reasons import PendingReason, ReasonCode

# A pending task counts as demand for the autoscaler only with these codes
# (placement_pass.py); a job is demand if ANY of its alternatives could use new capacity.
_WANTS_CAPACITY = (ReasonCode.NO_CAPACITY, ReasonCode.SCALING_UP)


class Alternatives:
    """One job's alternatives, preferred first, and their scheduler classes for this pass."""

    __slots__ = ("key", "names", "options", "classes", "reason")

    def __init__(self, resources: Resources, constraints: tuple[Constraint, ...]):
        self.key = (id(resources), id(constraints))
        self.names = resources.tpu_alternatives
        self.options = [resources.choose(n) for n in self.names]
        self.classes: list = []  # scheduler._Class per option, filled by the scheduler
        self.reason: PendingReason | None = None  # set once no alternative fits this pass


def combined_reason(names: Sequence[str], reasons: Sequence[PendingReason]) -> PendingReason:
    """"none of v6e-4, v5litepod-4 fits now: v6e-4: no v6e worker in any region; ...".

    Its code is the first alternative's that new capacity would help (so the autoscaler
    is asked), else the preferred alternative's."""
    code = next((r.code for r in reasons if r.code in _WANTS_CAPACITY), reasons[0].code)
    said = "; ".join(f"{n}: {r.message}" for n, r in zip(names, reasons, strict=True))
    return PendingReason(code, f"none of the alternatives {', '.join(names)} fits now: {said}",
                         {"alternatives": [{"tpu": n, **r.to_dict()}
                                           for n, r in zip(names, reasons, strict=True)]})


def demoted_reason(reasons: MutableMapping[str, PendingReason], pending: Sequence[TaskDemand],
                   demoted: Mapping[str, str]) -> None:
    """Prefix the reasons of demoted users' tasks with why they run as batch (in place)."""
    done: dict[tuple[int, str], PendingReason] = {}
    for t in pending:
        note = demoted.get(t.user)
        reason = reasons.get(t.task_id) if note else None
        if reason is None:
            continue
        key = (id(reason), t.user)
        wrapped = done.get(key)
        if wrapped is None:
            wrapped = done[key] = PendingReason(
                reason.code, f"{note}: scheduled as batch; {reason.message}",
                {**reason.details, "budget": note, "band": "batch"})
        reasons[t.task_id] = wrapped
