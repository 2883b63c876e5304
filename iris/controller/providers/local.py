"""LocalProvider: slices as `iris worker` processes on this machine (the embedded default).

Not the autoscaler. One worker process per host of a slice, started with the attributes a
cloud host would have (region, zone, scale group, slice id, accelerator type and count), so
the scheduler and gang placement see a local slice exactly as they would a TPU slice. A
host is up once its worker prints the address it serves at; what it logs goes to
`worker.log` in its work directory. `preempt` SIGKILLs a slice's
processes, as a cloud reclaiming the machines would. Workers stop with this process
(`--exit-with-parent`), so nothing outlives the provider's owner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from iris.base.errors import CapacityError, ConflictError
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import (
    HostInfo,
    SliceInfo,
    SliceState,
    check_create_request,
)
from iris.wire.states import ENV_CACHE_ENV

# A worker that has not said where it serves within this long is reported FAILED.
_BOOT_TIMEOUT_S = 120.0


@dataclass
class _Host:
    host_id: str
    proc: subprocess.Popen
    address: str = ""
    up: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Slice:
    slice_id: str
    group: str
    zone: str
    hosts: list[_Host]
    preempted: bool = False

    def info(self) -> SliceInfo:
        if self.preempted:
            state, detail = SliceState.PREEMPTED, "its processes were killed"
        elif any(h.proc.poll() is not None for h in self.hosts):
            state, detail = SliceState.FAILED, "a worker process exited"
        elif all(h.up.is_set() for h in self.hosts):
            state, detail = SliceState.READY, ""
        else:
            state, detail = SliceState.CREATING, "workers starting"
        hosts = tuple(HostInfo(h.host_id, h.address) for h in self.hosts)
        return SliceInfo(self.slice_id, self.group, self.zone, state, hosts, detail)


class LocalProvider:
    def __init__(self, controller_address: str, root: Path, region: str, *,
                 zone_capacity: dict[str, int] | None = None):
        """`zone_capacity`: hosts each zone may hold (None = no limit), for stock-outs."""
        self._controller = controller_address
        self._root = Path(root)
        self._region = region
        self._capacity = dict(zone_capacity or {})
        self._slices: dict[str, _Slice] = {}
        self._lock = threading.Lock()

    def set_capacity(self, zone: str, hosts: int | None) -> None:
        with self._lock:
            if hosts is None:
                self._capacity.pop(zone, None)
            else:
                self._capacity[zone] = hosts

    def create_slice(self, group: ScaleGroupConfig, zone: str, slice_id: str) -> SliceInfo:
        check_create_request(group, zone, slice_id)
        with self._lock:
            if slice_id in self._slices:
                raise ConflictError(f"slice {slice_id} already exists "
                                    f"(group {self._slices[slice_id].group})")
            used = sum(len(s.hosts) for s in self._slices.values()
                       if s.zone == zone and not s.preempted)
            limit = self._capacity.get(zone)
            if limit is not None and used + group.hosts_per_slice > limit:
                raise CapacityError(f"zone {zone}: no capacity for {group.hosts_per_slice} "
                                    f"more local hosts ({used} of {limit} in use)")
            record = _Slice(slice_id, group.name, zone,
                            [self._start_host(group, zone, slice_id, i)
                             for i in range(group.hosts_per_slice)])
            self._slices[slice_id] = record
            return record.info()

    def _start_host(self, group: ScaleGroupConfig, zone: str, slice_id: str,
                    index: int) -> _Host:
        host_id = f"{slice_id}-h{index}"
        attrs = {"zone": zone, "scale_group": group.name, "slice_id": slice_id,
                 "preemptible": str(group.preemptible).lower()}
        if group.accelerator_variant:
            attrs["accelerator_type"] = group.accelerator_variant
            attrs["accelerator_count"] = str(group.accelerators_per_host)
        argv = [sys.executable, "-m", "iris", "worker", "--controller", self._controller,
                "--region", self._region, "--worker-id", host_id, "--exit-with-parent",
                "--work-dir", str(self._root / slice_id / host_id),
                # One task environment cache for every host of every slice (as a Slurm node
                # shares one): each venv is built once, not at each host's first task. Named
                # apart from the slices (a slice id starts with a letter).
                "--env-cache", os.environ.get(ENV_CACHE_ENV) or str(self._root / ".envs")]
        for key, value in attrs.items():
            argv += ["--attr", f"{key}={value}"]
        work_dir = self._root / slice_id / host_id
        work_dir.mkdir(parents=True, exist_ok=True)
        with open(work_dir / "worker.log", "ab") as log:  # the child keeps its own copy
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log,
                                    stdin=subprocess.DEVNULL, text=True,
                                    start_new_session=True)
        host = _Host(host_id, proc)
        threading.Thread(target=self._watch_boot, args=(host,), daemon=True,
                         name=f"local-host-{host_id}").start()
        return host

    @staticmethod
    def _watch_boot(host: _Host) -> None:
        for line in host.proc.stdout:  # "worker ID serving at ADDRESS"
            if " serving at " in line:
                host.address = line.rsplit(" ", 1)[1].strip()
                host.up.set()
                break
        for _ in host.proc.stdout:  # keep draining so the worker never blocks on a pipe
            pass

    def delete_slice(self, slice_id: str) -> None:
        with self._lock:
            record = self._slices.pop(slice_id, None)
        if record is not None:
            _stop(record.hosts)

    def list_slices(self, group: str | None = None) -> list[SliceInfo]:
        with self._lock:
            records = sorted(self._slices.values(), key=lambda s: s.slice_id)
        return [r.info() for r in records if group is None or r.group == group]

    def slice_status(self, slice_id: str) -> SliceInfo:
        with self._lock:
            record = self._slices.get(slice_id)
        return record.info() if record is not None else SliceInfo.not_found(slice_id)

    def preempt(self, slice_id: str) -> None:
        """The cloud takes the machines back: every process of the slice dies at once."""
        with self._lock:
            record = self._slices.get(slice_id)
            if record is None:
                return
            record.preempted = True
        for host in record.hosts:
            _kill_group(host.proc)

    def close(self) -> None:
        with self._lock:
            records, self._slices = list(self._slices.values()), {}
        _stop([host for record in records for host in record.hosts])  # all at once


def _stop(hosts: list[_Host]) -> None:
    for host in hosts:
        if host.proc.poll() is None:
            host.proc.terminate()  # SIGTERM: the worker stops its attempts with their grace
    for host in hosts:
        try:
            host.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_group(host.proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
