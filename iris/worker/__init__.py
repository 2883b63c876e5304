"""Layer 4, worker side: runs task attempts on one host as isolated processes.

Modules (import them directly; this package re-exports nothing, so importing one part never
pulls in the rest):

- runner: AttemptRunner, the host's attempt runner that the Worker actor drives
- process: AttemptProcess (own session and group, stop with grace, reaping), spawners
- outcome: exit status -> Outcome (succeeded, failed, killed, OOM, stopped, unknown)
- cgroups: per-attempt memory cgroups (v2 or v1), OOM detection
- output: stdout/stderr capture through FIFOs that survive a worker restart
- records, adoption: what a restarted worker finds, adopts or kills
- fencing: AttemptTable, stale attempts refused by attempt number
- capacity: CapacityLedger, never run more than advertised
- envs: per-job uv venvs keyed by content hash
- bundles: content-addressed workspace bundles
- zygote, zygote_main: pre-imported interpreters forking callable attempts (fast starts)
- task_runtime: inside the attempt: on_preempt, IRIS_* facts, the callable runner
"""

__all__: list[str] = []
