"""Pending reasons with a place in line: the kernel's waiting jobs as queue.py sees them. Pure.

Not the order itself (scheduling/queue.py) nor the text (scheduling/reasons.py): this builds
their inputs from the job kernel's state and the pass's host views, and rewrites the reasons
of jobs that wait for room (NO_CAPACITY, SCALING_UP), so `iris job status`, `--json` and
the dashboard all read "2nd in batch for v5litepod-16; ahead: /alice/train (64 chips): ...".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from iris.base.errors import InvalidRequestError
from iris.base.resources import Resources
from iris.controller.jobs.state import KernelState
from iris.controller.scheduling import queue, reasons
from iris.controller.scheduling.model import Band, Demand, HostView, per_host_demand


def annotate(pending_reasons: Mapping[str, dict], state: KernelState,
             hosts: Sequence[HostView], demoted: Collection[str] = ()) -> dict[str, dict]:
    """`pending_reasons` (job id -> reason dict) with places in line added where they apply.
    `demoted`: users over budget, whose work waits in the batch line whatever it asked."""
    out = dict(pending_reasons)
    if not any(r.get("code") in reasons.WAITS_IN_LINE for r in out.values()):
        return out
    spots = queue.positions(waiting_jobs(state, demoted), running_usage(hosts),
                            fleet_total(hosts))
    for job_id, reason in pending_reasons.items():
        spot = spots.get(job_id)
        if spot is None or reason.get("code") not in reasons.WAITS_IN_LINE:
            continue
        out[job_id] = reasons.in_line(reason, spot.position, spot.band.name.lower(),
                                      spot.accelerator,
                                      [(w.job_id, w.label) for w in spot.ahead])
    return out


def waiting_jobs(state: KernelState, demoted: Collection[str] = ()) -> list[queue.Waiting]:
    counts: dict[str, int] = {}
    for job_id, _ in state.pending:
        counts[job_id] = counts.get(job_id, 0) + 1
    out = []
    for job_id, n in counts.items():
        job = state.jobs[job_id]
        res = job.spec.resources
        need = per_host_demand(res)
        total = Demand(need.cpu * n, need.memory * n, need.chips * n)
        try:
            band = Band.BATCH if job.spec.user in demoted else Band.parse(job.spec.priority)
        except InvalidRequestError:  # a bad stored spec shows no place in line, no more
            continue
        out.append(queue.Waiting(job_id, job.spec.user, band, _pool(res), total,
                                 job.submitted_at, _label(total)))
    return out


def running_usage(hosts: Sequence[HostView]) -> dict[tuple[Band, str], Demand]:
    usage: dict[tuple[Band, str], Demand] = {}
    for h in hosts:
        for a in h.running:
            if not a.terminating:
                key = (a.band, a.user)
                usage[key] = usage.get(key, Demand()) + a.demand
    return usage


def fleet_total(hosts: Sequence[HostView]) -> Demand:
    total = Demand()
    for h in hosts:
        total = total + h.capacity
    return total


def _pool(resources: Resources) -> str:
    return resources.accelerator or "cpu"


def _label(total: Demand) -> str:
    if total.chips:
        return f"{total.chips} chips"
    return f"{total.cpu:g} cpu"
