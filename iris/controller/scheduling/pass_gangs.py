"""The gang steps of a scheduling pass (scheduler.py's `_Pass`): a gang's tasks asked for
whole, on its accelerator or, with fallbacks, on the first alternative with free room before
evicting for any; each ask goes to the regions through the coordinator (gang_placement.py).

A mixin of `_Pass`: it reads the pass's state (fleet, preemptor, plan, caches) and calls its
`_mark`, `_charge`, `_over_quota` and `_scaling`. Pure, like the pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iris.base.resources import Resources
from iris.controller.scheduling.fallbacks import combined_reason
from iris.controller.scheduling.fleet import Pool
from iris.controller.scheduling.gang_placement import GangAsk, GangRequest, place_gang
from iris.controller.scheduling.model import TaskDemand, gang_shape, per_host_demand
from iris.controller.scheduling.reasons import PendingReason, ReasonCode

if TYPE_CHECKING:  # the pass's own record of a job; it imports this module at run time
    from iris.controller.scheduling.scheduler import _Job


def task_pool(resources: Resources) -> Pool:
    shape = resources.tpu_slice
    if shape is not None:
        return ("tpu", shape.family)
    if resources.gpu:
        return ("gpu", resources.gpu)
    return ("cpu", None)


class GangSteps:
    """`_Pass`'s gang steps (see the module docstring)."""

    def _place_gang(self, job: _Job, gang_id: str, tasks: list[TaskDemand]) -> None:
        first = tasks[0]
        if gang_id in self.reserving:
            self._mark(tasks, PendingReason(ReasonCode.WAITING_FOR_GANG,
                                            f"gang {gang_id} is being reserved",
                                            {"gang": gang_id}))
            return
        if len(tasks) < first.gang_size:
            self._mark(tasks, PendingReason(
                ReasonCode.WAITING_FOR_GANG,
                f"only {len(tasks)} of the {first.gang_size} tasks of gang {gang_id} are "
                "pending; a gang starts whole", {"gang": gang_id, "pending": len(tasks)}))
            return
        if not first.resources.has_fallbacks:
            result = self._gang_on(job, gang_id, tasks, first.resources, self.failed_gangs)
            if not isinstance(result, GangRequest):
                self._mark(tasks, result)
            return
        options = self._options(first.resources)
        # Free room on any alternative beats evicting for the preferred one: a round with
        # no eviction budget first (its refusals cached apart: they are not final).
        budget, self.pre.budget = self.pre.budget, 0
        try:
            for res in options:
                if isinstance(self._gang_on(job, gang_id, tasks, res, self.failed_free),
                              GangRequest):
                    return
        finally:
            self.pre.budget = budget
        reasons = []
        for res in options:
            result = self._gang_on(job, gang_id, tasks, res, self.failed_gangs)
            if isinstance(result, GangRequest):
                return
            if result.code is ReasonCode.PREEMPTING:
                self._mark(tasks, result)
                return
            reasons.append(result)
        self._mark(tasks, combined_reason(first.resources.tpu_alternatives, reasons))

    def _options(self, res: Resources) -> list[Resources]:
        """Each alternative of a fallback request as its own Resources, once per pass."""
        found = self.alternatives.get(id(res))
        if found is None:
            found = self.alternatives[id(res)] = (res, [res.choose(a) for a in
                                                        res.tpu_alternatives])
        return found[1]

    def _gang_on(self, job: _Job, gang_id: str, tasks: list[TaskDemand], res: Resources,
                 failed: dict[tuple[object, ...], PendingReason]
                 ) -> GangRequest | PendingReason:
        """Ask for the gang on one accelerator type; a request is recorded (and its tasks
        marked) here, a refusal is returned for the caller to show."""
        form_key = (id(res), len(tasks), id(tasks[0].constraints))
        form = self.gang_forms.get(form_key)
        if form is None or form[0] is not res:
            form = self.gang_forms[form_key] = (res, per_host_demand(res), gang_shape(
                res, len(tasks), tasks[0].constraints), task_pool(res))
        _, need, shape, pool = form
        quota = self._over_quota(job.user, need, len(tasks))
        if quota is not None:
            return quota
        known = failed.get((shape, job.band, need, pool))
        if known is not None:  # what place_gang would answer from its cache, sooner
            return known
        ask = GangAsk(gang_id, job.job_id, job.band, tuple(t.task_id for t in tasks), shape,
                      need, pool)
        result = place_gang(self.fleet, self.pre, ask, self.config.max_gang_regions, failed)
        if isinstance(result, GangRequest):
            self.plan.gang_requests.append(result)
            self._charge(job.user, job.band, need, len(tasks))
            self._mark(tasks, PendingReason(
                ReasonCode.WAITING_FOR_GANG,
                f"reserving gang {gang_id} in {', '.join(result.regions)}",
                {"gang": gang_id, "regions": list(result.regions)}))
            return result
        if result.code is ReasonCode.NO_CAPACITY:
            result = self._scaling(shape.accelerator or "cpu") or result
        return result
