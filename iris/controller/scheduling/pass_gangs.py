"""The gang steps of a scheduling pass (scheduler.py's `_Pass`): a gang's tasks asked for
whole, on its accelerator or, with fallbacks, on the first alternative with free room before
evicting for any; each ask goes to the regions through the coordinator (gang_placement.py).

An object of its own, made by the pass: it owns the gang caches of one pass (refusals, the
forms of each ask, each request's alternatives) and reaches the pass through its ledger
interface (`mark`, `charge`, `over_quota`, `scaling_reason`, with its fleet, preemptor and plan).
Pure, like the pass.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from iris.base.resources import Resources
from iris.controller.scheduling.fallbacks import combined_reason
from iris.controller.scheduling.fleet import Pool
from iris.controller.scheduling.gang_placement import GangRequest, place_gang
from iris.controller.scheduling.model import TaskDemand, gang_shape, per_host_demand
from iris.controller.scheduling.reasons import PendingReason, ReasonCode

if TYPE_CHECKING:  # the pass and its record of a job; they import this module at run time
    from iris.controller.scheduling.scheduler import _Job, _Pass


def task_pool(resources: Resources) -> Pool:
    shape = resources.tpu_slice
    if shape is not None:
        return ("tpu", shape.family)
    if resources.gpu:
        return ("gpu", resources.gpu)
    return ("cpu", None)


class GangSteps:
    """One pass's gang steps (see the module docstring)."""

    def __init__(self, ledger: _Pass, reserving: Collection[str], max_gang_regions: int):
        self._ledger = ledger
        self._reserving = set(reserving)
        self._max_regions = max_gang_regions
        self._failed_gangs: dict[tuple[object, ...], PendingReason] = {}
        self._failed_free: dict[tuple[object, ...], PendingReason] = {}  # fallbacks, no evicting
        self._slice_views: dict = {}  # gang_placement._SliceView per slice shape, this pass
        # id(Resources) -> (it, its alternatives); holding `it` keeps the id from reuse.
        self._alternatives: dict[int, tuple[Resources, list[Resources]]] = {}
        self._forms: dict[tuple[int, int, int], tuple] = {}  # (res, need, shape, pool)

    def place(self, job: _Job, gang_id: str, tasks: list[TaskDemand]) -> None:
        first = tasks[0]
        mark = self._ledger.mark
        if gang_id in self._reserving:
            mark(tasks, PendingReason(ReasonCode.WAITING_FOR_GANG,
                                            f"gang {gang_id} is being reserved",
                                            {"gang": gang_id}))
            return
        if len(tasks) < first.gang_size:
            mark(tasks, PendingReason(
                ReasonCode.WAITING_FOR_GANG,
                f"only {len(tasks)} of the {first.gang_size} tasks of gang {gang_id} are "
                "pending; a gang starts whole", {"gang": gang_id, "pending": len(tasks)}))
            return
        if not first.resources.has_fallbacks:
            result = self._gang_on(job, gang_id, tasks, first.resources, self._failed_gangs)
            if not isinstance(result, GangRequest):
                mark(tasks, result)
            return
        options = self._options(first.resources)
        # Free room on any alternative beats evicting for the preferred one: a round with
        # no eviction budget first (its refusals cached apart: they are not final).
        with self._ledger.pre.no_evictions():
            for res in options:
                if isinstance(self._gang_on(job, gang_id, tasks, res, self._failed_free),
                              GangRequest):
                    return
        reasons = []
        for res in options:
            result = self._gang_on(job, gang_id, tasks, res, self._failed_gangs)
            if isinstance(result, GangRequest):
                return
            if result.code is ReasonCode.PREEMPTING:
                mark(tasks, result)
                return
            reasons.append(result)
        mark(tasks, combined_reason(first.resources.tpu_alternatives, reasons))

    def _options(self, res: Resources) -> list[Resources]:
        """Each alternative of a fallback request as its own Resources, once per pass."""
        found = self._alternatives.get(id(res))
        if found is None:
            found = self._alternatives[id(res)] = (res, [res.choose(a) for a in
                                                        res.tpu_alternatives])
        return found[1]

    def _gang_on(self, job: _Job, gang_id: str, tasks: list[TaskDemand], res: Resources,
                 failed: dict[tuple[object, ...], PendingReason]
                 ) -> GangRequest | PendingReason:
        """Ask for the gang on one accelerator type; a request is recorded (and its tasks
        marked) here, a refusal is returned for the caller to show."""
        form_key = (id(res), len(tasks), id(tasks[0].constraints))
        form = self._forms.get(form_key)
        if form is None or form[0] is not res:
            form = self._forms[form_key] = (res, per_host_demand(res), gang_shape(
                res, len(tasks), tasks[0].constraints), task_pool(res))
        _, need, shape, pool = form
        ledger = self._ledger
        quota = ledger.over_quota(job.user, need, len(tasks))
        if quota is not None:
            return quota
        known = failed.get((shape, job.band, need, pool))
        if known is not None:  # what place_gang would answer from its cache, sooner
            return known
        ask = GangRequest(gang_id, job.job_id, job.band, tuple(t.task_id for t in tasks),
                          shape, need=need, pool=pool)
        result = place_gang(ledger.fleet, ledger.pre, ask, self._max_regions, failed,
                            self._slice_views)
        if isinstance(result, GangRequest):
            ledger.plan.gang_requests.append(result)
            ledger.charge(job.user, job.band, need, len(tasks))
            ledger.mark(tasks, PendingReason(
                ReasonCode.WAITING_FOR_GANG,
                f"reserving gang {gang_id} in {', '.join(result.regions)}",
                {"gang": gang_id, "regions": list(result.regions)}))
            return result
        if result.code is ReasonCode.NO_CAPACITY:
            result = ledger.scaling_reason(shape.accelerator or "cpu") or result
        return result
