"""Unmet demand, routed to one region per job: the input of each region's autoscaler. Pure.

Not the autoscaler (autoscaler.py decides slices within a region) nor the scheduler. After
a scheduling pass, work that found no capacity anywhere (NO_CAPACITY or SCALING_UP, and
gangs every region refused) is turned into autoscaler asks. Each job's asks go to ONE
region, so two regions never both grow for the same work: a region that has a group able
to run the work, that the job's region constraints allow, and whose autoscaler is not
holding that accelerator back (a zone stocked out, churn cooldown, at max); of those, the
best scale-group priority, and among regions tied on it, the one the job's name hashes
highest with (rendezvous hashing), so a burst of jobs spreads over every open region at
once. The choice is stable from pass to pass while nothing changes, so slices already
booting in that region keep absorbing the demand, and a region that starts holding back
moves only the jobs it had.

Fallbacks (`tpu="v6e-4,v5litepod-4"`): the asks are for the preferred alternative; the next
one is asked for only when NO region can grow the preferred (no group offers it, or every
region holding it back: stocked out, cooldown, at max). Asking for several at once would
boot slices the job leaves idle once any of them lands. A job with
`existing_capacity_only` is never demand: it waits for hosts already up (`hold_existing`).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Mapping, Sequence

from iris.controller.config import ScaleGroupConfig
from iris.controller.jobs.spec import JobSpec
from iris.controller.regions.group_shapes import Ask, accelerator_keys, unmet_slices
from iris.controller.scheduling.constraints import matches_all, parse_constraints
from iris.controller.scheduling.model import per_host_demand
from iris.controller.scheduling.reasons import ReasonCode


def accelerator_of(spec: JobSpec) -> str:
    """The name groups are matched by (accelerator_keys): the slice type for multi-host
    TPU work, the TPU family for single-host TPU tasks (they pack onto any slice of it),
    the GPU model, or "cpu"."""
    shape = spec.resources.tpu_slice
    if shape is not None and shape.hosts == 1:
        return shape.family
    return spec.resources.accelerator or "cpu"


def asks_for(spec: JobSpec, tasks: int) -> list[Ask]:
    """`tasks` unplaced tasks of a job as autoscaler asks (whole gangs for TPU slices)."""
    need = per_host_demand(spec.resources)
    shape = spec.resources.tpu_slice
    if spec.gang_size > 1:
        whole = spec.resources.count if shape is not None and shape.hosts > 1 else 0
        return [Ask(spec.gang_size, whole, need.chips, need.cpu)
                for _ in range(max(1, tasks // spec.gang_size))]
    return [Ask(tasks, 0, need.chips, need.cpu)]


def route(unmet: Iterable[tuple[JobSpec, int]],
          groups: Mapping[str, Sequence[ScaleGroupConfig]],
          blocked: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, int]]:
    """region -> group -> more slices wanted. `unmet`: (job spec, unplaced tasks);
    `groups`: each autoscaled region's groups; `blocked`: region -> accelerator -> why held."""
    asks: dict[tuple[str, str], list[Ask]] = {}
    for job_spec, tasks in unmet:
        if job_spec.existing_capacity_only:
            continue
        for spec in alternatives(job_spec):
            choice = _region_for(spec, groups, blocked)
            if choice is not None:
                asks.setdefault(choice, []).extend(asks_for(spec, tasks))
                break
    out: dict[str, dict[str, int]] = {}
    for (region, group_name), group_asks in asks.items():
        group = next(g for g in groups[region] if g.name == group_name)
        n = unmet_slices(group, group_asks)
        if n:
            out.setdefault(region, {})[group_name] = n
    return out


def alternatives(spec: JobSpec) -> list[JobSpec]:
    """The job once per accelerator alternative, preferred first (itself if it has none)."""
    res = spec.resources
    if not res.has_fallbacks:
        return [spec]
    return [dataclasses.replace(spec, resources=res.choose(t)) for t in res.tpu_alternatives]


def hold_existing(reason: Mapping) -> dict:
    """The pending reason of a job that waits for capacity already up instead of asking."""
    return {"code": ReasonCode.EXISTING_CAPACITY_ONLY.value,
            "message": f"{reason.get('message', 'no capacity')}; it waits for existing "
                       "capacity (existing_capacity_only: the autoscaler is not asked)",
            "details": {**reason.get("details", {}), "existing_capacity_only": True}}


def held_back(spec: JobSpec, groups: Mapping[str, Sequence[ScaleGroupConfig]],
              blocked: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Regions that could grow for this job but whose autoscaler holds back: region -> why
    (zones stocked out or over quota, churn cooldown, at max_slices). Empty when the job was
    routed somewhere, or no region has a group for it."""
    if spec.existing_capacity_only or any(
            _region_for(s, groups, blocked) is not None for s in alternatives(spec)):
        return {}
    accel = accelerator_of(spec)
    return {r: blocked[r][accel] for r in sorted(groups) if accel in blocked.get(r, {})}


def _region_for(spec: JobSpec, groups: Mapping[str, Sequence[ScaleGroupConfig]],
                blocked: Mapping[str, Mapping[str, str]]) -> tuple[str, str] | None:
    accel = accelerator_of(spec)
    where = [c for c in parse_constraints(spec.constraints) if c.key in ("region", "zone")]
    options = []
    for region, region_groups in groups.items():
        if accel in blocked.get(region, {}):
            continue
        for g in region_groups:
            if accel not in accelerator_keys(g) or not _fits_host(spec, g):
                continue
            if g.accelerator_variant != accel and g.accelerator_variant in blocked.get(
                    region, {}):
                continue  # family demand (single-host TPU): not to a group that holds back
            if not any(matches_all(where, {"region": region, "zone": z}) for z in g.zones):
                continue
            options.append((-g.priority, region, g.name))
    if not options:
        return None
    best = min(options)[0]
    # Among regions equally preferred, each job goes to the one its name hashes highest
    # with (rendezvous hashing), not always the first by name: a burst of demand then tries
    # every open region at once instead of filling one, failing a create, backing off and
    # only then moving on; and a region becoming blocked moves only the jobs it had.
    regions = {o[1] for o in options if o[0] == best}
    region = max(sorted(regions), key=lambda r: zlib.crc32(f"{spec.name}@{r}".encode()))
    return region, min(o for o in options if o[:2] == (best, region))[2]


def _fits_host(spec: JobSpec, group: ScaleGroupConfig) -> bool:
    """A TPU job needs its exact slice type; a GPU/CPU job only enough accelerators a host."""
    shape = spec.resources.tpu_slice
    if shape is not None and shape.hosts > 1:
        return group.accelerator_variant == shape.name
    return per_host_demand(spec.resources).chips <= max(group.accelerators_per_host, 0)


def plan_growth(unplaced: Iterable[tuple[JobSpec, int]],
                groups: Mapping[str, Sequence[ScaleGroupConfig]],
                reports: Mapping[str, Mapping], reasons: dict[str, dict]) -> dict[str, dict]:
    """After a pass: the demand for each region's autoscaler (`route`), and in `reasons`
    (job -> pending reason, updated in place) why work every region holds back from
    growing for still waits: a zone stocked out, a cooldown, a group at max."""
    unplaced = list(unplaced)
    blocked = {r: rep.get("blocked", {}) for r, rep in reports.items()}
    for spec, _ in unplaced:
        held = held_back(spec, groups, blocked)
        if held:
            said = "; ".join(f"region {r}: {why}" for r, why in held.items())
            reason = reasons.get(spec.name, {})
            reasons[spec.name] = {
                "code": ReasonCode.NO_CAPACITY.value,
                "message": f"{reason.get('message', 'no capacity')}; autoscaling is held "
                           f"back: {said}",
                "details": {**reason.get("details", {}), "autoscaler": held}}
    return route(unplaced, groups, blocked)


def scaling_up(reports: Mapping[str, Mapping]) -> dict[str, list[str]]:
    """Accelerator -> regions adding hosts of it now (the SCALING_UP reason)."""
    out: dict[str, list[str]] = {}
    for region, report in sorted(reports.items()):
        for accel in report.get("scaling_up", {}):
            out.setdefault(accel, []).append(region)
    return out
