"""iris.Resources as Ray task/actor options, or an error naming what Ray cannot express. Pure.

Not Ray itself (no import of ray here). The mapping:

| Iris                                  | Ray                                                    |
|---------------------------------------|--------------------------------------------------------|
| cpu=C                                 | num_cpus=C                                             |
| memory="16GiB"                        | memory=<bytes> (Ray's logical memory resource)         |
| gpu="H100", count=8                   | num_gpus=8, accelerator_type="H100"                    |
| gpu=..., count=8, hosts=4 (a gang)    | a placement group: 4 bundles {GPU: 8, CPU: C}, STRICT_SPREAD (all or nothing, one host each) |
| tpu="v5litepod-8" (one host)          | resources={"TPU": 8}, accelerator_type="TPU-V5LITEPOD" |
| tpu="v5litepod-16" (4 hosts), count=N | refused: Ray cannot hold a whole multi-host slice as one gang |
| tpu="v6e-4,v5litepod-4" (fallbacks)   | refused: a Ray request names one resource shape        |
| disk="100GB"                          | refused: Ray has no disk resource                      |
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iris.base.errors import UnschedulableError
from iris.base.resources import Resources


@dataclass(frozen=True)
class RayPlan:
    """Options for `.options(**options)`, and the bundles of a gang's placement group
    (empty: no placement group)."""

    options: dict = field(default_factory=dict)
    gang_bundles: tuple = ()


def plan(res: Resources) -> RayPlan:
    options: dict = {"num_cpus": res.cpu}
    if res.memory_bytes:
        options["memory"] = res.memory_bytes
    if res.disk_bytes:
        raise UnschedulableError(f"disk={res.disk}: Ray has no disk resource, so the Ray "
                                 "backend cannot reserve it; drop disk= or run on Iris", "disk")
    if res.gpu:
        options["num_gpus"] = res.count
        options["accelerator_type"] = res.gpu
        if res.hosts > 1:
            bundle = {"GPU": res.count, "CPU": res.cpu}
            return RayPlan(options, tuple(dict(bundle) for _ in range(res.hosts)))
        return RayPlan(options)
    if res.tpu:
        return RayPlan(options | _tpu(res))
    return RayPlan(options)


def _tpu(res: Resources) -> dict:
    if res.has_fallbacks:
        raise UnschedulableError(
            f"tpu={','.join(res.tpu_alternatives)}: Ray cannot express alternatives (a Ray "
            "request names one resource shape); name one type, or run on Iris", "tpu")
    shape = res.tpu_slice
    if shape.hosts > 1 or res.count > 1:
        what = (f"{res.count} slices of {shape.name}" if res.count > 1
                else f"{shape.name} ({shape.hosts} hosts)")
        raise UnschedulableError(
            f"tpu={shape.name}, count={res.count}: {what} is a gang of "
            f"{shape.hosts * res.count} hosts that must be placed whole on one slice; Ray "
            "places each host separately and cannot hold a whole slice as one gang, so the "
            "Ray backend refuses it. Run it on Iris, or ask for a single-host type "
            f"(e.g. {shape.family}-8)", "tpu")
    return {"resources": {"TPU": shape.chips}, "accelerator_type": f"TPU-{shape.family.upper()}"}

