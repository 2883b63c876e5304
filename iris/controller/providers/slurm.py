"""SlurmProvider: slices as Slurm allocations, through sbatch / squeue / sinfo / scancel.

Not the autoscaler, and not the batch script (slurm_script.py) or the commands
(slurm_cli.py). A region is one Slurm cluster; its zones are partitions. Creating a slice
submits ONE job of `hosts_per_slice` nodes whose step runs `iris worker` on each node;
deleting it cancels the job. Listing costs one `squeue` (this user's jobs in the region's
partitions) and one `sinfo` (node addresses and drains), whatever the number of slices.

Job -> slice (pure: `slice_from_job`):
- PENDING / REQUEUED / CONFIGURING -> CREATING, detail "pending: <Slurm's reason>"; a reason
  waiting cannot cure (PartitionNodeLimit, PartitionConfig, BadConstraints, an invalid
  account or QOS, a per-job limit) -> FAILED, so the autoscaler replaces it instead of
  waiting out its boot timeout. `create_slice` checks at once and cancels such a job, so
  the refusal reaches the autoscaler as a failed create naming the partition and reason.
- RUNNING -> READY (hosts `<slice>-<node>`); with a node drained (or draining) by Slurm, or
  less than `drain_before_end_s` of its time limit left, `draining` says why.
- PREEMPTED / CANCELLED / TIMEOUT / DEADLINE / SUSPENDED, and COMPLETING (a job ending
  that this provider did not cancel) -> PREEMPTED (the site took the nodes back); FAILED / NODE_FAIL / BOOT_FAIL / OUT_OF_MEMORY
  / COMPLETED -> FAILED.
Slurm shows ended jobs for MinJobAge (300 s by default); a job this provider cancelled is
hidden from then on, so a deleted slice is NOT_FOUND at once (the contract).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from iris.base.errors import ConfigError, ConflictError, InvalidRequestError, ProviderError
from iris.controller.config import ClusterConfig, ScaleGroupConfig
from iris.controller.config_providers import SlurmSite
from iris.controller.providers.base import HostInfo, SliceInfo, SliceState, check_create_request
from iris.controller.providers.slurm_cli import (
    SlurmCommands,
    SlurmJob,
    SlurmNode,
    parse_duration,
)
from iris.controller.providers.slurm_script import (
    SliceJob,
    batch_script,
    parse_comment,
    sbatch_args,
)

_UNASKED = object()
_CREATING = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING",
             "RESIZING", "SIGNALING", "STAGE_OUT"}
_TAKEN_BACK = {"PREEMPTED", "CANCELLED", "TIMEOUT", "DEADLINE", "SUSPENDED", "STOPPED",
               "REVOKED"}
# Pending reasons no amount of waiting cures: the request breaks a partition's, account's or
# QOS's limit on ONE job, or names something that does not exist. (Per-user and group
# limits - QOSMaxNodePerUserLimit, AssocGrpNodeLimit... - clear as other jobs end: those wait.)
NEVER_REASONS = frozenset({
    "PartitionNodeLimit", "PartitionTimeLimit", "PartitionConfig", "BadConstraints",
    "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed",
    "QOSMaxNodePerJobLimit", "QOSMaxCpuPerJobLimit", "QOSMaxGRESPerJob",
    "QOSMaxWallDurationPerJobLimit", "AssocMaxNodesPerJobLimit", "AssocMaxCpuPerJobLimit",
    "AssocMaxWallDurationPerJobLimit",
})


@dataclass(frozen=True)
class SlurmSettings:
    """One region's Slurm cluster, as the provider uses it."""

    cluster: str  # the Iris cluster's name: marks its jobs (two may share a Slurm user)
    region: str
    zones: tuple[str, ...]  # partitions (through site.partitions when named apart)
    controller_address: str
    site: SlurmSite = field(default_factory=SlurmSite)
    cluster_token: str = field(default="", repr=False)  # hex; written to a 0600 file
    iris_command: tuple[str, ...] = ()  # () = this controller's `python -m iris`


class SlurmProvider:
    """A Provider on a Slurm cluster; see the module docstring."""

    def __init__(self, settings: SlurmSettings, *, commands: SlurmCommands | None = None):
        self._s = settings
        site = settings.site
        self.commands = commands or SlurmCommands(site.conf, site.bin_dir, site.command_timeout_s)
        self._user = site.user or _login()
        self._root = Path(os.path.expanduser(site.work_dir)) / settings.cluster
        self._token_file = self._root / "cluster.token"
        self._iris = settings.iris_command or (sys.executable, "-m", "iris")
        self._partitions = {z: site.partition(z) for z in settings.zones}
        self._lock = threading.Lock()
        self._hidden: set[str] = set()  # job ids this provider cancelled
        self._nodes: dict[str, SlurmNode] = {}
        self._known: dict[str, str] = {}  # slice id -> its job id, as last listed
        self._kill_wait: float | None | object = _UNASKED
        self._grace: dict[str, float | None] = {}
        self._write_token()

    @classmethod
    def from_config(cls, config: ClusterConfig, region: str, *, cluster_token: str = "",
                    commands: SlurmCommands | None = None, **overrides) -> SlurmProvider:
        found = config.regions.get(region)
        if found is None or found.slurm is None:
            raise ConfigError(f"regions.{region}: no such region with slurm scale groups")
        values = {"cluster": config.name, "region": region, "zones": found.zones,
                  "controller_address": config.controller.address, "site": found.slurm,
                  "cluster_token": cluster_token,
                  "iris_command": iris_words(found.slurm.iris_command), **overrides}
        return cls(SlurmSettings(**values), commands=commands)

    # ---- the Provider contract --------------------------------------------------------

    def create_slice(self, group: ScaleGroupConfig, zone: str, slice_id: str) -> SliceInfo:
        check_create_request(group, zone, slice_id)
        if group.accelerator_type == "tpu":
            raise InvalidRequestError(f"group: {group.name} is a tpu group; Slurm slices "
                                      "offer cpu and gpu (GRES) nodes", "group")
        if zone not in self._partitions:
            raise InvalidRequestError(f"zone: {zone} is not a partition of region "
                                      f"{self._s.region} ({', '.join(self._s.zones)})", "zone")
        partition = self._partitions[zone]
        job = self._slice_job(zone, partition, slice_id, *self._timers(partition))
        Path(job.slice_dir).mkdir(parents=True, exist_ok=True)
        try:
            job_id = self.commands.sbatch(sbatch_args(job, group), batch_script(job, group))
        except ProviderError as exc:
            raise type(exc)(f"zone {zone} (partition {partition}): {exc}") from exc
        # One squeue after the submit: another live job of that name means the id was in
        # use (cancel ours, keep it), and Slurm's verdict on ours (will it ever run?).
        named = self._query(["-n", slice_id])
        other = [j for j in named if j.job_id != job_id and j.job_id not in self._hidden
                 and _alive(j)]
        if other:
            self._cancel(job_id)
            raise ConflictError(f"slice {slice_id} already exists as Slurm job "
                                f"{other[0].job_id} in partition {other[0].partition}")
        self._known[slice_id] = job_id
        mine = [j for j in named if j.job_id == job_id]
        info = self._to_slice(mine[0]) if mine else SliceInfo(
            slice_id, group.name, zone, SliceState.CREATING, detail=f"job {job_id} submitted")
        if info.state is SliceState.FAILED:  # Slurm accepted it but will never run it
            self._cancel(job_id)
            raise ProviderError(f"zone {zone} (partition {partition}): Slurm will never run "
                                f"job {job_id}: {info.detail}")
        return info

    def delete_slice(self, slice_id: str) -> None:
        """scancel of the job the last list named (one call: deletes are O(changes)), or
        found by name first."""
        known = self._known.get(slice_id)
        ids = [known] if known else [j.job_id for j in self._live_jobs(
            self._query(["-n", slice_id]))]
        if ids:
            self._cancel(*ids)
        self._known.pop(slice_id, None)

    def list_slices(self, group: str | None = None) -> list[SliceInfo]:
        for partition in set(self._partitions.values()):  # asked once, before any create
            self._timers(partition)
        jobs = self._query([])
        self._refresh_nodes()
        seen = {j.job_id for j in jobs}
        with self._lock:
            gone = self._hidden - seen  # purged by Slurm: forget them, and their dirs
            self._hidden -= gone
        for job_id in gone:
            self._forget_dirs(job_id)
        live = self._live_jobs(jobs)
        self._known = {j.name: j.job_id for j in live}
        out = [self._to_slice(j) for j in live]
        return [s for s in out if group is None or s.group == group]

    def slice_status(self, slice_id: str) -> SliceInfo:
        jobs = self._live_jobs(self._query(["-n", slice_id]))
        if not jobs:
            return SliceInfo.not_found(slice_id)
        if any(n not in self._nodes for n in jobs[-1].nodes):
            self._refresh_nodes()
        return self._to_slice(jobs[-1])

    def close(self) -> None:
        """Nothing to release: Slurm's commands are processes, each already ended."""

    # ---- helpers ---------------------------------------------------------------------

    def _query(self, extra: list[str]) -> list[SlurmJob]:
        """This user's jobs in the region's partitions that are slices of this cluster."""
        jobs = self.commands.squeue(self._user, sorted(set(self._partitions.values())), *extra)
        return [j for j in jobs if parse_comment(j.comment).get("cluster") == self._s.cluster]

    def _live_jobs(self, jobs: list[SlurmJob]) -> list[SlurmJob]:
        """Per slice id, its job: the newest of that name this provider did not cancel,
        unless that one has ended and a newer one was cancelled here (a past slice of the
        same id, deleted since: NOT_FOUND, as the contract wants)."""
        with self._lock:
            hidden = set(self._hidden)
        newest: dict[str, SlurmJob] = {}
        cancelled_after: dict[str, bool] = {}
        for job in sorted(jobs, key=lambda j: int(j.job_id) if j.job_id.isdigit() else 0):
            if job.job_id in hidden:
                cancelled_after[job.name] = True
            else:
                newest[job.name], cancelled_after[job.name] = job, False
        return [j for name, j in newest.items()
                if not (cancelled_after[name] and not _alive(j))]

    def _refresh_nodes(self) -> None:
        nodes = self.commands.sinfo(sorted(set(self._partitions.values())))
        self._nodes = {n.name: n for n in nodes}

    def _cancel(self, *job_ids: str) -> None:
        with self._lock:
            self._hidden.update(job_ids)
        self.commands.scancel(list(job_ids))

    def _to_slice(self, job: SlurmJob) -> SliceInfo:
        zone = parse_comment(job.comment)["zone"]
        return slice_from_job(job, zone, self._nodes, self._s.site.drain_before_end_s)

    def _timers(self, partition: str) -> tuple[float | None, float | None]:
        """(KillWait, the partition's GraceTime) in seconds, asked once each."""
        if self._kill_wait is _UNASKED:
            self._kill_wait = _seconds(self._ask(self.commands.config_value, "KillWait"))
        if partition not in self._grace:
            self._grace[partition] = _seconds(self._ask(self.commands.partition_value,
                                                        partition, "GraceTime"))
        return self._kill_wait, self._grace[partition]

    @staticmethod
    def _ask(fn, *args) -> str | None:
        try:
            return fn(*args)
        except ProviderError:
            return None  # the worker then assumes Slurm's defaults

    def _slice_job(self, zone: str, partition: str, slice_id: str,
                   kill_wait_s: float | None, grace_time_s: float | None) -> SliceJob:
        return SliceJob(cluster=self._s.cluster, region=self._s.region, zone=zone,
                        partition=partition, slice_id=slice_id,
                        controller_address=self._s.controller_address,
                        iris_command=tuple(self._iris), slice_dir=str(self._root / slice_id),
                        env_cache=str(self._root.parent / "envs"),
                        token_file=str(self._token_file), worker_host=self._s.site.worker_host,
                        bin_dir=self._s.site.bin_dir, export_env=self._s.site.export_env,
                        kill_wait_s=kill_wait_s,
                        grace_time_s=grace_time_s)

    def _forget_dirs(self, job_id: str) -> None:
        """A cancelled slice's job is purged: its worker dirs can go (best effort)."""
        for out in self._root.glob(f"*/slurm-{job_id}.out"):
            shutil.rmtree(out.parent, ignore_errors=True)

    def _write_token(self) -> None:
        if not self._s.cluster_token:
            return
        self._root.mkdir(parents=True, exist_ok=True)
        tmp = self._token_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self._s.cluster_token)
        os.chmod(tmp, 0o600)  # an older file's mode is kept by O_CREAT on an existing path
        os.replace(tmp, self._token_file)


def _alive(job: SlurmJob) -> bool:
    return job.state in _CREATING or job.state in ("RUNNING", "COMPLETING")


def slice_from_job(job: SlurmJob, zone: str, nodes: dict[str, SlurmNode],
                   drain_before_end_s: float) -> SliceInfo:
    """Pure: what one Slurm job means as a slice (see the module docstring)."""
    group = parse_comment(job.comment).get("group", "")
    hosts = tuple(HostInfo(f"{job.name}-{n}", nodes[n].address if n in nodes else n)
                  for n in job.nodes)
    where = f"job {job.job_id} in {job.partition}"
    draining = ""
    if job.state in _CREATING:
        state = SliceState.FAILED if job.reason in NEVER_REASONS else SliceState.CREATING
        detail = f"{where}: pending ({job.reason})"
    elif job.state == "RUNNING":
        state, detail = SliceState.READY, f"{where}: running on {','.join(job.nodes)}"
        drained = [n for n in job.nodes if n in nodes and nodes[n].draining]
        if drained:
            node = nodes[drained[0]]
            draining = f"Slurm node {node.name} is {node.state}: {node.reason}"
        elif job.time_left_s is not None and job.time_left_s < drain_before_end_s:
            draining = f"{job.time_left_s:.0f} s left of its Slurm time limit"
        if job.time_left_s is not None:
            detail += f", {job.time_left_s:.0f} s left"
    elif job.state == "COMPLETING":  # ending, and not at Iris's asking (those are hidden)
        state, detail = SliceState.PREEMPTED, f"{where}: completing (ended by Slurm)"
    elif job.state in _TAKEN_BACK:
        state, detail = SliceState.PREEMPTED, f"{where}: {job.state.lower()} by Slurm"
    else:
        state, detail = SliceState.FAILED, f"{where}: {job.state.lower()} ({job.reason})"
    return SliceInfo(slice_id=job.name, group=group, zone=zone, state=state, hosts=hosts,
                     detail=detail, draining=draining)


def _seconds(text: str | None) -> float | None:
    """KillWait's "30 sec", GraceTime's "5" (both seconds), or "00:00:05"; None if none."""
    words = (text or "").split()
    if not words:
        return None
    return float(words[0]) if words[0].isdigit() else parse_duration(words[0])


def _login() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def iris_words(text: str | None) -> tuple[str, ...]:
    """The site's `iris_command` as words (None: this interpreter's `-m iris`)."""
    return tuple(shlex.split(text)) if text else ()


__all__ = ["NEVER_REASONS", "SlurmProvider", "SlurmSettings", "iris_words", "slice_from_job"]
