"""Slurm's early end of an allocation, read as the preemption notice tasks already know.

Not the GCE watcher (preemption_notice.py, whose Notice, notice files and responder this
reuses). Under Slurm, every early end of an allocation reaches the job step the same way:
SIGTERM to every process of the step, the worker AND its tasks (Slurm signals the whole
process tree itself), then SIGKILL KillWait seconds after the job's end time. Preemption
(PreemptMode=CANCEL, or REQUEUE of a job submitted --no-requeue, as Iris's are) first
extends the end time by the partition's GraceTime; scancel and the time limit do not.

So with `--preemption-notice slurm` (or auto inside a Slurm job) the worker's SIGTERM is the
notice: one `squeue` asks whether the job was preempted (its PreemptTime is set), and the
deadline is now + GraceTime + KillWait if so, else now + KillWait (the values the provider
read from the site and put in the step's environment; without them, Slurm's defaults). The
notice goes into every attempt directory and to the controller (which requeues this
worker's work on the preemption budget), then the worker stops. Tasks that registered
`iris.on_preempt` wait up to NOTICE_WAIT_S for the notice file before running their
callbacks, since Slurm's SIGTERM reaches them at the same moment as the worker's.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.worker.preemption_notice import Notice

_log = logging.getLogger(__name__)
ENV_JOB_ID = "SLURM_JOB_ID"
# Put in the step's environment by the provider (slurm_script.py), from the site's config.
ENV_KILL_WAIT = "IRIS_SLURM_KILL_WAIT_S"
ENV_GRACE_TIME = "IRIS_SLURM_GRACE_TIME_S"
# Slurm's defaults: KillWait 30 s; GraceTime 0 (no grace on preemption).
DEFAULT_KILL_WAIT_S, DEFAULT_GRACE_TIME_S = 30.0, 0.0
# The one squeue at SIGTERM answers in milliseconds; a slurmctld that does not answer in
# 2 s must not eat the grace (nor hold the worker's reports): the notice then says "ended",
# with KillWait only.
_QUERY_TIMEOUT_S = 2.0
# In the tasks' environment: how long their SIGTERM handler waits for the notice file the
# worker is writing (it writes within milliseconds of the same signal).
ENV_NOTICE_WAIT = "IRIS_NOTICE_WAIT_S"
NOTICE_WAIT_S = 2.0


def in_slurm_job() -> bool:
    return bool(os.environ.get(ENV_JOB_ID))


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def preempted(job_id: str, timeout_s: float = _QUERY_TIMEOUT_S) -> bool | None:
    """Whether Slurm preempted the job (its PreemptTime is set); None if squeue could not
    say (not installed on the node, slurmctld not answering)."""
    try:
        done = subprocess.run(["squeue", "-h", "-j", job_id, "-O", "PreemptTime"],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    value = done.stdout.strip()
    return bool(value) and value[0].isdigit()  # a date; "N/A", "None" or "" otherwise


def notice_for(job_id: str, was_preempted: bool | None, now: float, kill_wait_s: float,
               grace_time_s: float) -> Notice:
    """Pure: the notice a SIGTERM to job `job_id`'s step means."""
    if was_preempted:
        return Notice(f"Slurm preempted job {job_id} (GraceTime {grace_time_s:.0f} s, "
                      f"KillWait {kill_wait_s:.0f} s)", now + grace_time_s + kill_wait_s)
    return Notice(f"Slurm is ending job {job_id} (cancelled, time limit or preempted; "
                  f"KillWait {kill_wait_s:.0f} s)", now + kill_wait_s)


class SlurmNotice:
    """On the first SIGTERM: the notice (off the signal handler), then `stop`."""

    def __init__(self, responder: Callable[[Notice], None], stop: threading.Event, *,
                 on_signal: Callable[[str], None] | None = None,
                 on_sent: Callable[[], None] | None = None, clock: Clock = SYSTEM_CLOCK,
                 query: Callable[[str], bool | None] = preempted):
        """`on_signal(reason)` runs in the signal handler itself, before anything else: the
        worker marks its attempts' coming exits as its machine's end (Worker.machine_ending),
        as Slurm's SIGTERM reaches the tasks at the same moment. `on_sent()` once the notice
        went to the controller (or failed to): Worker.notice_sent."""
        self._responder, self._stop, self._clock, self._query = responder, stop, clock, query
        self._on_signal, self._on_sent = on_signal, on_sent
        self._job_id = os.environ.get(ENV_JOB_ID, "")
        self._kill_wait = _seconds(ENV_KILL_WAIT, DEFAULT_KILL_WAIT_S)
        self._grace = _seconds(ENV_GRACE_TIME, DEFAULT_GRACE_TIME_S)
        self._fired = threading.Lock()
        self.notice: Notice | None = None

    def install(self) -> SlurmNotice:
        """Take over SIGTERM (main thread only; elsewhere the plain stop stays)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.fire())
            _log.info("Slurm job %s: SIGTERM will be read as a preemption notice",
                      self._job_id)
        else:
            _log.warning("slurm notices need the main thread; SIGTERM stays a plain stop")
        return self

    def fire(self) -> None:
        """Called from the signal handler: do the work on a thread of its own."""
        if self._fired.acquire(blocking=False):
            if self._on_signal is not None:
                self._on_signal(f"Slurm sent SIGTERM to job {self._job_id or '?'}")
            threading.Thread(target=self._notify, name="slurm-notice", daemon=True).start()

    def _notify(self) -> None:
        try:
            was = self._query(self._job_id) if self._job_id else None
            self.notice = notice_for(self._job_id or "?", was, self._clock.wall(),
                                     self._kill_wait, self._grace)
            _log.warning("preemption notice: %s", self.notice.reason)
            self._responder(self.notice)
        finally:
            if self._on_sent is not None:
                self._on_sent()
            self._stop.set()

    def stop(self) -> None:
        """Nothing runs until a signal; present so a worker stops every watcher alike."""


__all__ = ["ENV_GRACE_TIME", "ENV_KILL_WAIT", "ENV_NOTICE_WAIT", "NOTICE_WAIT_S",
           "SlurmNotice", "in_slurm_job", "notice_for", "preempted"]
