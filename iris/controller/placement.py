"""First-fit placement of pending multi-host gangs onto live workers, whole or not at all. Pure.

Not the global scheduler (scheduling/), which places every single-host task; gangs come
here until their reservation through Region actors is wired into the controller. A gang's
tasks go to distinct workers (one task per host) or not at all. Usage per worker is derived from
the attempts the kernel wants running there, so a worker never gets more than it offers.
Every task left pending gets a reason a person can act on, in the scheduler's
vocabulary (scheduling/reasons.py ReasonCode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from iris.base.resources import Resources
from iris.controller.jobs.events import Placement
from iris.controller.jobs.state import KernelState
from iris.controller.scheduling.constraints import matches_all, parse_constraints
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.workers import WorkerInfo


@dataclass
class _Free:
    cpu: float
    memory: int
    accelerators: int


def free_capacity(state: KernelState, workers: Iterable[WorkerInfo],
                  stopping: dict[str, dict[str, Resources]] | None = None) -> dict[str, _Free]:
    """What is free on each worker: its offer minus the attempts the kernel wants there and
    those still stopping (told to stop, exit not yet reported)."""
    free = {}
    for w in workers:
        room = _Free(w.cpu, w.memory_bytes, w.accelerators)
        held = [state.jobs[state.attempts[a].job_id].spec.resources
                for a in state.by_worker.get(w.worker_id, ())]
        held += list((stopping or {}).get(w.worker_id, {}).values())
        for res in held:
            room.cpu -= res.cpu
            room.memory -= res.memory_bytes
            room.accelerators -= _accelerators(res)
        free[w.worker_id] = room
    return free


def place(state: KernelState, workers: dict[str, WorkerInfo],
          new_attempt_id: Callable[[], str],
          stopping: dict[str, dict[str, Resources]] | None = None,
          ) -> tuple[list[tuple[Placement, ...]], dict]:
    """Gangs to assign now, and a pending reason per job that could not be placed."""
    free = free_capacity(state, workers.values(), stopping)
    gangs = _pending_gangs(state)
    assignments, reasons = [], {}
    for job_id, indices in gangs:
        spec = state.jobs[job_id].spec
        res = spec.resources
        constraints = parse_constraints(spec.constraints)
        eligible = [w for w in workers.values() if matches_all(constraints, w.attributes)
                    and (res.accelerator is None
                         or w.attributes.get("accelerator_type") == res.accelerator)]
        fitting = [w for w in eligible if _fits(free[w.worker_id], res)]
        if len(fitting) < len(indices):
            reasons[job_id] = _reason(res, len(indices), workers, eligible, fitting)
            continue
        chosen = sorted(fitting, key=lambda w: -free[w.worker_id].cpu)[: len(indices)]
        gang = []
        for index, worker in zip(indices, chosen, strict=True):
            room = free[worker.worker_id]
            room.cpu -= res.cpu
            room.memory -= res.memory_bytes
            room.accelerators -= _accelerators(res)
            gang.append(Placement(job_id, index, worker.worker_id, new_attempt_id()))
        assignments.append(tuple(gang))
    return assignments, reasons


def _pending_gangs(state: KernelState) -> list[tuple[str, list[int]]]:
    """Pending multi-host tasks grouped into whole gangs, production band first, oldest first."""
    by_gang: dict[tuple[str, int], list[int]] = {}
    for job_id, index in state.pending:
        size = state.jobs[job_id].spec.gang_size
        if size == 1:
            continue  # single-host tasks belong to the global scheduler
        by_gang.setdefault((job_id, index // size), []).append(index)
    whole = [(job_id, sorted(idx)) for (job_id, _), idx in by_gang.items()
             if len(idx) == state.jobs[job_id].spec.gang_size]
    band = {"production": 0, "interactive": 1, "batch": 2}
    return sorted(whole, key=lambda g: band.get(state.jobs[g[0]].spec.priority, 3))


def _fits(room: _Free, res: Resources) -> bool:
    return (room.cpu >= res.cpu - 1e-9 and room.memory >= res.memory_bytes
            and room.accelerators >= _accelerators(res))


def _accelerators(res: Resources) -> int:
    shape = res.tpu_slice
    if shape is not None:
        return shape.chips_per_host
    return res.count if res.gpu else 0


def _reason(res: Resources, needed: int, workers: dict, eligible: list, fitting: list) -> dict:
    shape = (f"cpu={res.cpu} memory={res.memory_bytes}"
             + (f" {res.accelerator}" if res.accelerator else ""))
    if not workers:
        code, message = ReasonCode.NO_CAPACITY, "no worker has registered yet"
    elif not eligible:
        code, message = (ReasonCode.CONSTRAINT_UNMATCHED,
                         f"no worker matches {shape} and the constraints")
    else:
        code, message = ReasonCode.NO_CAPACITY, (f"needs {needed} worker(s) with free {shape}; "
                                        f"{len(fitting)} of {len(eligible)} eligible have room")
    return {"code": code.value, "message": message}
