"""What one Slurm slice is submitted as: sbatch options and the batch script. Pure text.

Not the submission (slurm.py runs sbatch). One slice is ONE allocation of
`hosts_per_slice` nodes; its batch script starts one job step (`srun`, one task per node)
whose task on every node is `iris worker`, with the node's share of the allocation as its
attributes (CPUs, memory) and the GPUs Slurm gave it from GRES (the step's own
CUDA_VISIBLE_DEVICES, which the worker hands out to its tasks).

The cluster token never appears on a command line, in the job's environment or in the
script (all three are readable through squeue/scontrol/ps): the worker reads it from a
0600 file on the shared filesystem (`--token-file`). The script goes to sbatch on stdin.
`--export=NONE` (or only the site's `export_env` names) keeps the controller's own
environment out of the job; `--no-requeue` makes
a preemption end the allocation instead of restarting it under the same id, so Iris
requeues the work itself and a slice never comes back from the dead.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from iris.controller.config import ScaleGroupConfig
from iris.controller.config_providers import SlurmGroup

COMMENT_PREFIX = "iris"


@dataclass(frozen=True)
class SliceJob:
    """Everything one slice's allocation is made from."""

    cluster: str
    region: str
    zone: str
    partition: str
    slice_id: str
    controller_address: str
    iris_command: tuple[str, ...]  # e.g. ("/shared/venv/bin/python", "-m", "iris")
    slice_dir: str  # on the shared filesystem: worker dirs, sbatch's output
    # Per node under it: the task environments every slice there reuses (content-keyed
    # and built under file locks, so several clusters of one user may share it too).
    env_cache: str
    token_file: str
    worker_host: str | None  # None: each node's first address (`hostname -I`)
    bin_dir: str | None = None
    export_env: tuple[str, ...] = ()  # variables of sbatch's environment the job gets
    # The site's KillWait and the partition's GraceTime, for the worker's notice deadline
    # (worker/slurm_notice.py); None: unknown (the worker assumes Slurm's defaults).
    kill_wait_s: float | None = None
    grace_time_s: float | None = None


def comment(cluster: str, group: str, zone: str) -> str:
    """The job comment that marks a job as a slice of this cluster (squeue shows it)."""
    return f"{COMMENT_PREFIX} cluster={cluster} group={group} zone={zone}"


def parse_comment(text: str) -> dict[str, str]:
    """`comment`'s fields, or {} for a job that is not an Iris slice."""
    words = text.split()
    if not words or words[0] != COMMENT_PREFIX:
        return {}
    fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    return fields if {"cluster", "group", "zone"} <= set(fields) else {}


def sbatch_args(job: SliceJob, group: ScaleGroupConfig) -> list[str]:
    opts = group.slurm or SlurmGroup()
    args = [f"--job-name={job.slice_id}", f"--partition={job.partition}",
            f"--nodes={group.hosts_per_slice}", "--ntasks-per-node=1", "--no-requeue",
            f"--export={','.join(job.export_env) or 'NONE'}", f"--comment={comment(job.cluster, group.name, job.zone)}",
            f"--output={job.slice_dir}/slurm-%j.out", f"--chdir={job.slice_dir}"]
    for flag, value in (("account", opts.account), ("qos", opts.qos),
                        ("constraint", opts.constraint), ("cpus-per-task", opts.cpus_per_node),
                        ("mem", opts.mem_per_node), ("time", opts.time_limit)):
        if value is not None:
            args.append(f"--{flag}={value}")
    gres = opts.gres
    if gres is None and group.accelerator_type == "gpu" and group.accelerators_per_host:
        gres = f"gpu:{group.accelerators_per_host}"
    if gres:
        args.append(f"--gres={gres}")
    if opts.exclusive:
        args.append("--exclusive")
    return args + list(opts.sbatch_args)


def batch_script(job: SliceJob, group: ScaleGroupConfig) -> str:
    """The batch script: one `srun` step, `iris worker` on every node of the allocation."""
    step = _step(job, group)
    path = f"export PATH={shlex.quote(job.bin_dir)}:\"$PATH\"\n" if job.bin_dir else ""
    for var, value in (("IRIS_SLURM_KILL_WAIT_S", job.kill_wait_s),
                       ("IRIS_SLURM_GRACE_TIME_S", job.grace_time_s)):
        if value is not None:
            path += f"export {var}={value:g}\n"
    return (
        "#!/bin/bash\n"
        f"# Iris slice {job.slice_id}: group {group.name}, cluster {job.cluster}, "
        f"zone {job.zone}. One `iris worker` per node.\n"
        f"{path}"
        f"STEP={shlex.quote(step)}\n"
        # --export=ALL: the job's NONE would otherwise reach the step too (SLURM_EXPORT_ENV).
        "exec srun --export=ALL --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c \"$STEP\"\n"
    )


def _step(job: SliceJob, group: ScaleGroupConfig) -> str:
    host = shlex.quote(job.worker_host) if job.worker_host else \
        "$(hostname -I 2>/dev/null | awk '{print $1}')"
    attrs = {"zone": job.zone, "scale_group": group.name, "slice_id": job.slice_id,
             "cluster": job.cluster, "provider": "slurm", "slurm_partition": job.partition,
             "preemptible": str(group.preemptible).lower()}
    if group.accelerator_variant:
        attrs["accelerator_type"] = group.accelerator_variant
        attrs["accelerator_count"] = str(group.accelerators_per_host)
    words = [*map(shlex.quote, job.iris_command), "worker",
             "--controller", shlex.quote(job.controller_address),
             "--region", shlex.quote(job.region),
             "--worker-id", f"{shlex.quote(job.slice_id)}-\"$SLURMD_NODENAME\"",
             "--work-dir", "\"$WORK\"",
             "--token-file", shlex.quote(job.token_file),
             "--bind", "\"tcp://$HOST:0\"", "--preemption-notice", "slurm", "--warm"]
    for key, value in attrs.items():
        words += ["--attr", shlex.quote(f"{key}={value}")]
    words += ["--attr", "\"cpu=$SLURM_CPUS_ON_NODE\"", "--attr", "\"slurm_node=$SLURMD_NODENAME\"",
              "--attr", "\"slurm_job_id=$SLURM_JOB_ID\"", "$MEMORY"]
    return "\n".join([
        f"HOST={host}",
        "[ -n \"$HOST\" ] || HOST=$(hostname)",
        # The node's share of the allocation: --mem, else --mem-per-cpu x CPUs, else the
        # worker's own reading of the machine.
        "MEM_MB=${SLURM_MEM_PER_NODE:-}",
        "if [ -z \"$MEM_MB\" ] && [ -n \"${SLURM_MEM_PER_CPU:-}\" ]; then",
        "  MEM_MB=$((SLURM_MEM_PER_CPU * SLURM_CPUS_ON_NODE)); fi",
        "MEMORY=''",
        "if [ -n \"$MEM_MB\" ]; then MEMORY=\"--attr memory=$((MEM_MB * 1048576))\"; fi",
        # Task environments (uv venvs, seconds to build) outlive the slice: every worker on
        # this node shares one cache, which its file locks make safe (worker/envs.py).
        f"ENVS={shlex.quote(job.env_cache)}/\"$SLURMD_NODENAME\"",
        f"WORK={shlex.quote(job.slice_dir)}/\"$SLURMD_NODENAME\"",
        "mkdir -p \"$ENVS\" \"$WORK\" && ln -sfn \"$ENVS\" \"$WORK/envs\"",
        "exec " + " ".join(words),
    ]) + "\n"


__all__ = ["SliceJob", "batch_script", "comment", "parse_comment", "sbatch_args"]
