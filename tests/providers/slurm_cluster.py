"""A real multi-node Slurm cluster on this host, for tests: munged, slurmctld, four slurmd.

Debian's slurm-wlm (22.05) is built with multiple-slurmd support, so `slurmd -N nK` runs
node nK of a cluster whose every node is this machine (recipes.md section 7). Everything
lives in one temp directory: the munge key and socket, slurm.conf and gres.conf, state and
spool dirs, logs, and the fake GPUs (character devices with the null device's numbers: GRES
refuses regular files). Ports are free loopback ports picked at start, so two clusters
(two xdist workers) never collide. `stop` cancels every job, waits for the nodes to be
idle (no job step left running) and stops the daemons by pid.

Partitions: `main` (n1-n4, the default), `gpu` (n1-n2, GraceTime 5 s) and `high` (n1-n4,
higher priority tier: a job there preempts `main`/`gpu` jobs, which Slurm CANCELs after
their GraceTime), `small` (MaxNodes=1), plus any a test adds (`add_partition`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

NODES = ("n1", "n2", "n3", "n4")
PARTITIONS = ("main", "gpu", "small", "high", "za", "zb")
GPUS_PER_NODE = 8
# Slurm's timers, small so tests are quick: KillWait between SIGTERM and SIGKILL of a step;
# MinJobAge keeps ended jobs visible to squeue (the provider must hide what it cancelled).
KILL_WAIT_S = 5
GRACE_TIME_S = 5
_DAEMON_WAIT_S = 60.0


def slurm_installed() -> bool:
    return all(shutil.which(c) for c in ("munged", "slurmctld", "slurmd", "sbatch", "squeue"))


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class SlurmCluster:
    """See the module docstring. `env` is what Slurm's clients need (SLURM_CONF)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="iris-slurm-"))
        self.conf = self.dir / "slurm.conf"
        # The "shared filesystem" of the site: every test's cluster keeps its slices' dirs
        # here (one subdirectory per cluster name), and task environments are built once.
        self.shared = self.dir / "shared"
        self.env = {**(os.environ if env is None else env), "SLURM_CONF": str(self.conf)}
        self._procs: list[subprocess.Popen] = []
        self._munged: subprocess.Popen | None = None
        self._ctld: subprocess.Popen | None = None
        self.extra_partitions: list[str] = []

    # ---- lifecycle --------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        os.chmod(self.dir, 0o755)  # munged wants its socket's directory searchable
        for sub in ("munge", "state", "spool", "log", "dev", "jobs"):
            (self.dir / sub).mkdir()
        os.chmod(self.dir / "munge", 0o700)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        for i in range(GPUS_PER_NODE):
            os.mknod(self.dir / "dev" / f"nvidia{i}", 0o666 | 0o020000, os.makedev(1, 3))
        ports = _free_ports(2 + len(NODES))
        self._write_conf(ports)
        m = self.dir / "munge"
        self._munged = self._spawn(["munged", "-F", "--force", f"--socket={m}/sock",
                                    f"--key-file={key}", f"--log-file={m}/log",
                                    f"--pid-file={m}/pid", f"--seed-file={m}/seed"])
        self._wait(lambda: (m / "sock").exists(), "munged's socket")
        self._start_ctld()
        for node in NODES:
            self._procs.append(self._spawn(["slurmd", "-D", "-f", str(self.conf), "-N", node]))
        self._wait(lambda: self.idle_nodes() == set(NODES), "four idle nodes")
        return self

    def _start_ctld(self) -> None:
        self._ctld = self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(self._answers, "slurmctld")

    def stop(self) -> None:
        try:
            self.cancel_all()
        finally:
            for proc in [*self._procs, self._ctld, self._munged]:
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in [*self._procs, self._ctld, self._munged]:
                if proc is None:
                    continue
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
            shutil.rmtree(self.dir, ignore_errors=True)

    def restart_ctld(self, down_s: float = 0.0) -> None:
        """Stop slurmctld (SIGTERM: it saves its state), optionally stay down, start it."""
        assert self._ctld is not None
        self._ctld.send_signal(signal.SIGTERM)
        self._ctld.wait(timeout=60)
        threading.Event().wait(down_s)
        self._start_ctld()

    def cancel_all(self) -> None:
        """Every job cancelled, every node idle and resumed, partitions as configured."""
        if self._ctld is None or self._ctld.poll() is not None:
            return
        self.run("scancel", "--user", os.environ.get("USER", "root"), check=False)
        for node in NODES:
            self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        for name in self.extra_partitions:
            self.run("scontrol", "delete", f"partitionname={name}", check=False)
        self.extra_partitions = []
        for name in PARTITIONS:
            self.run("scontrol", "update", f"partitionname={name}", "state=UP", check=False)
        self._wait(lambda: not self.active_jobs() and self.idle_nodes() == set(NODES),
                   "no job left and every node idle")

    # ---- levers for tests ----------------------------------------------------------------

    def run(self, *argv: str, check: bool = True, stdin: str | None = None) -> str:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              input=stdin, timeout=60, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
        return done.stdout

    def jobs(self) -> list[dict]:
        """Every job slurmctld knows (ended ones too): id, name, state, reason, nodes."""
        out = self.run("squeue", "-h", "-t", "all", "-o", "%i|%j|%T|%r|%N|%P", check=False)
        rows = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 6:
                rows.append(dict(zip(("id", "name", "state", "reason", "nodes", "partition"),
                                     parts, strict=True)))
        return rows

    def active_jobs(self) -> list[dict]:
        return [j for j in self.jobs() if j["state"] in ("PENDING", "RUNNING", "COMPLETING",
                                                        "CONFIGURING", "SUSPENDED")]

    def idle_nodes(self) -> set[str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%T", check=False)
        return {n for n, _, state in (line.partition("|") for line in out.splitlines())
                if state == "idle"}

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%T", check=False)
        return {n: state for n, _, state in (line.partition("|") for line in out.splitlines())}

    def drain(self, node: str, reason: str = "maintenance") -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")

    def set_partition(self, name: str, **settings: str) -> None:
        self.run("scontrol", "update", f"partitionname={name}",
                 *(f"{k}={v}" for k, v in settings.items()))

    def add_partition(self, name: str, nodes: str = "n[1-4]", **settings: str) -> None:
        self.run("scontrol", "create", f"partitionname={name}", f"nodes={nodes}",
                 "state=UP", *(f"{k}={v}" for k, v in settings.items()))
        self.extra_partitions.append(name)

    def sbatch(self, *args: str, script: str = "#!/bin/bash\nsleep 600\n") -> str:
        """An outside user's job (not Iris's): its id."""
        out = self.run("sbatch", "--parsable", "--export=NONE", "-o", "/dev/null", *args,
                       stdin=script)
        return out.strip().split(";")[0]

    # ---- internals --------------------------------------------------------------------

    def _write_conf(self, ports: list[int]) -> None:
        d, host = self.dir, socket.gethostname().split(".")[0]
        ctld_port, slurmd_port, node_ports = ports[0], ports[1], ports[2:]
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs=4 "
            f"RealMemory=4000 Gres=gpu:{GPUS_PER_NODE}" for n, p in zip(NODES, node_ports,
                                                                        strict=True))
        self.conf.write_text(f"""\
ClusterName=iris{ctld_port}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={d}/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/ctld.pid
SlurmdPidFile={d}/spool/%n.pid
SlurmctldLogFile={d}/log/ctld.log
SlurmdLogFile={d}/log/%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
MinJobAge=120
KillWait={KILL_WAIT_S}
InactiveLimit=0
DefMemPerCPU=100
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
{nodes}
PartitionName=main Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=gpu Nodes=n[1-2] MaxTime=INFINITE State=UP PriorityTier=1 GraceTime={GRACE_TIME_S}
PartitionName=small Nodes=n[1-4] MaxNodes=1 MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high Nodes=n[1-4] MaxTime=INFINITE State=UP PriorityTier=10
PartitionName=za Nodes=n[1-4] MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=zb Nodes=n[1-4] MaxTime=INFINITE State=UP PriorityTier=1
""")
        (d / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName=n[1-4] Name=gpu File={d}/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n")

    def _spawn(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

    def _answers(self) -> bool:
        return subprocess.run(["scontrol", "ping"], env=self.env, capture_output=True,
                              text=True, timeout=30).stdout.count("UP") > 0

    def _wait(self, predicate, what: str) -> None:
        gate = threading.Event()
        for _ in range(int(_DAEMON_WAIT_S / 0.1)):
            if predicate():
                return
            gate.wait(0.1)
        logs = "\n".join(p.read_text()[-2000:] for p in (self.dir / "log").glob("*.log"))
        raise AssertionError(f"Slurm: timed out waiting for {what}; logs:\n{logs}")


__all__ = ["GPUS_PER_NODE", "GRACE_TIME_S", "KILL_WAIT_S", "NODES", "SlurmCluster",
           "slurm_installed"]
