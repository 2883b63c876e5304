"""What a worker has promised to running attempts: a pure ledger, no processes, no clock.

The worker advertises its Resources to the controller and never runs more than that: each
attempt is admitted against what is still free (cpu, memory, disk, and accelerators: a TPU
host is used whole by one task, GPUs are counted) and released when it ends. A refusal
names the resource that is short and changes nothing.

GPUs are also named: an attempt that asks for N GPUs is given N device indices (the lowest
free, 0..count-1 of the advertised GPUs) that no other attempt on this host holds, and
the runner sets CUDA_VISIBLE_DEVICES to them, so two tasks sharing a host never share a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from iris.base.errors import ConflictError
from iris.base.resources import Resources


class CapacityExceededError(ConflictError):
    """The attempt does not fit in what this worker still has free."""


@dataclass(frozen=True)
class _Use:
    cpu: float
    memory: int
    disk: int
    tpu_hosts: int
    gpus: int


def _use_of(req: Resources) -> _Use:
    return _Use(cpu=req.cpu, memory=req.memory_bytes, disk=req.disk_bytes,
                tpu_hosts=1 if req.tpu else 0, gpus=req.count if req.gpu else 0)


class CapacityLedger:
    """Admissions against one worker's advertised resources, keyed by attempt."""

    def __init__(self, advertised: Resources):
        self.advertised = advertised
        self._total = _Use(cpu=advertised.cpu, memory=advertised.memory_bytes,
                           disk=advertised.disk_bytes, tpu_hosts=1 if advertised.tpu else 0,
                           gpus=advertised.count if advertised.gpu else 0)
        self._held: dict[str, _Use] = {}
        self._devices: dict[str, tuple[int, ...]] = {}

    def free(self) -> dict[str, float]:
        used = {k: sum(getattr(u, k) for u in self._held.values())
                for k in ("cpu", "memory", "disk", "tpu_hosts", "gpus")}
        return {k: getattr(self._total, k) - v for k, v in used.items()}

    def admit(self, key: str, req: Resources, devices: tuple[int, ...] | None = None) -> None:
        """Hold `req` for attempt `key`, or raise CapacityExceededError (nothing held).

        `devices`: the GPU indices the attempt already holds (one adopted after a worker
        restart keeps the GPUs it runs on); None picks the lowest free ones."""
        if key in self._held:
            raise ConflictError(f"attempt {key} already holds resources on this worker")
        if req.tpu and req.tpu != self.advertised.tpu:
            raise CapacityExceededError(
                f"attempt {key}: needs a {req.tpu} host, this worker is "
                f"{self.advertised.tpu or 'not a TPU host'}")
        if req.gpu and req.gpu != self.advertised.gpu:
            raise CapacityExceededError(
                f"attempt {key}: needs {req.gpu} GPUs, this worker has "
                f"{self.advertised.gpu or 'none'}")
        want, free = _use_of(req), self.free()
        for name in ("cpu", "memory", "disk", "tpu_hosts", "gpus"):
            if getattr(want, name) > free[name] + 1e-9:
                raise CapacityExceededError(
                    f"attempt {key}: needs {name}={getattr(want, name)}, only {free[name]} "
                    f"of {getattr(self._total, name)} free")
        picked = self._pick_devices(want.gpus, devices)
        self._held[key] = want
        if picked:
            self._devices[key] = picked

    def _pick_devices(self, n: int, asked: tuple[int, ...] | None) -> tuple[int, ...]:
        taken = {d for ds in self._devices.values() for d in ds}
        if asked is not None and len(asked) == n and not taken & set(asked) \
                and all(0 <= d < self._total.gpus for d in asked):
            return tuple(asked)
        return tuple(d for d in range(self._total.gpus) if d not in taken)[:n]

    def devices(self, key: str) -> tuple[int, ...]:
        """The GPU indices attempt `key` holds (empty for an attempt without GPUs)."""
        return self._devices.get(key, ())

    def release(self, key: str) -> None:
        self._held.pop(key, None)
        self._devices.pop(key, None)

    def holders(self) -> list[str]:
        return sorted(self._held)
