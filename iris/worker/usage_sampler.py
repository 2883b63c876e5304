"""The worker's sampler of what its attempts use: one thread, one reading per attempt per
interval, the newest handed to the next report. Not the readers (usage.py) nor the sending.

Cost, the reason for the interval: a reading is one /proc/PID/stat per process of the
attempt and one cgroup file, about 60 us for a one-process attempt here; 100 attempts every
2 s is ~0.3 % of a core (`python -m bench.inspect`). The work directory is walked only every
`disk_every`-th reading (a tree of 20,000 files takes ~30 ms to walk), and GPUs are read
with one `nvidia-smi` call for the whole host, where it exists.

At an attempt's end (`finish`, on its process watcher's thread, before its cgroup and work
directory go) the totals combine the readings with what the kernel kept: CPU time and the
resident high-water mark from wait4's rusage, the cgroup's own high-water mark. So a task
that lived less than one interval still reports what it used.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.wire.control import UsageTotals
from iris.worker.outcome import Outcome, OutcomeKind
from iris.worker.process import AttemptProcess
from iris.worker.usage import GpuBusy, attempt_pids, dir_size, read_procs

_log = logging.getLogger(__name__)
Key = tuple[str, int]  # (task id, attempt number): the runner's key of an attempt
ENV_INTERVAL = "IRIS_USAGE_INTERVAL_S"


@dataclass(frozen=True)
class SamplerConfig:
    # Seconds between readings: a point every 2 s draws a run of minutes as a curve, and 100
    # attempts cost ~0.45 % of a core (see the module docstring). 0 turns sampling off.
    interval_s: float = 2.0
    # The work directory's size every this many readings (every 30 s at 2 s).
    disk_every: int = 15
    # Entries looked at per walk of a work directory (a lower bound past it).
    max_disk_entries: int = 20_000

    @classmethod
    def from_env(cls, environ: dict | None = None) -> SamplerConfig:
        """`$IRIS_USAGE_INTERVAL_S` overrides the interval (tests, a busy host)."""
        raw = (environ if environ is not None else os.environ).get(ENV_INTERVAL)
        if not raw:
            return cls()
        try:
            interval = float(raw)
        except ValueError:
            _log.warning("%s=%r is not a number of seconds: using %s", ENV_INTERVAL, raw,
                         cls.interval_s)
            return cls()
        return cls(interval_s=max(0.0, interval))


@dataclass(frozen=True)
class Reading:
    """One attempt's use at `at` (wall-clock epoch seconds): see control.UsageSample."""

    at: float
    cpu_s: float
    rss_bytes: int
    memory_bytes: int | None = None
    disk_bytes: int | None = None
    accel_busy: float | None = None


@dataclass
class _Track:
    """What the sampler remembers of one attempt between readings."""

    readings: int = 0
    cpu_s: float = 0.0
    peak_rss: int = 0
    disk_bytes: int | None = None
    devices: tuple[int, ...] | None = None  # its GPUs, read once from request.json
    accel: list[float] = field(default_factory=lambda: [0.0, 0.0])  # sum, count
    fresh: Reading | None = None  # the newest reading not yet taken for a report


class UsageSampler:
    """Thread-safe. `live()` lists the running attempts (AttemptRunner.live)."""

    def __init__(self, live: Callable[[], Iterable[AttemptProcess]],
                 config: SamplerConfig | None = None, clock: Clock = SYSTEM_CLOCK,
                 gpus: GpuBusy | None = None):
        self.config = config or SamplerConfig()
        self._live = live
        self._clock = clock
        self._gpus = gpus if gpus is not None else GpuBusy()
        self._lock = threading.Lock()
        self._tracks: dict[Key, _Track] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> UsageSampler:
        if self.config.interval_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="iris-usage-sampler")
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)

    def _run(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            try:
                self.sample_once()
            except Exception:  # one bad read must not end sampling for every attempt
                _log.exception("usage sampling failed")

    def sample_once(self) -> None:
        """Read every live attempt once (the thread does this every interval)."""
        procs = [p for p in self._live() if not p.done]
        busy = self._gpus.read() if self._gpus.available and procs else {}
        now = self._clock.wall()
        readings = {(p.spec.task_id, p.spec.attempt): self._read(p, busy, now) for p in procs}
        with self._lock:
            for key in [k for k in self._tracks if k not in readings]:
                del self._tracks[key]  # ended without finish() (a failed start): forget it
            for key, (reading, devices) in readings.items():
                self._note(self._tracks.setdefault(key, _Track(devices=devices)), reading)

    def _read(self, proc: AttemptProcess, busy: dict[int, float],
              now: float) -> tuple[Reading, tuple[int, ...] | None]:
        key = (proc.spec.task_id, proc.spec.attempt)
        with self._lock:
            track = self._tracks.get(key)
            readings = track.readings if track else 0
            devices = track.devices if track else None
        if devices is None and busy:
            devices = _devices(proc)
        procs = read_procs(attempt_pids(proc.pid, proc.record.start_ticks, proc.cgroup))
        disk = (dir_size(proc.spec.cwd, self.config.max_disk_entries)
                if readings % max(1, self.config.disk_every) == 0 else None)
        accel = None
        if devices and busy:
            values = [busy[d] for d in devices if d in busy]
            accel = sum(values) / len(values) if values else None
        memory = proc.cgroup.memory_now() if proc.cgroup is not None else None
        return Reading(now, procs.cpu_s, procs.rss_bytes, memory, disk, accel), devices

    @staticmethod
    def _note(track: _Track, reading: Reading) -> None:
        track.readings += 1
        # CPU time only grows: a reading that missed a process (it exited between the
        # listing and the read) must not make the attempt's counter go back.
        track.cpu_s = max(track.cpu_s, reading.cpu_s)
        track.peak_rss = max(track.peak_rss, reading.rss_bytes)
        if reading.disk_bytes is not None:
            track.disk_bytes = reading.disk_bytes
        if reading.accel_busy is not None:
            track.accel[0] += reading.accel_busy
            track.accel[1] += 1
        track.fresh = Reading(reading.at, track.cpu_s, reading.rss_bytes,
                              reading.memory_bytes, reading.disk_bytes, reading.accel_busy)

    def take(self) -> dict[Key, Reading]:
        """The newest reading of each attempt not taken before (for the next report)."""
        out = {}
        with self._lock:
            for key, track in self._tracks.items():
                if track.fresh is not None:
                    out[key], track.fresh = track.fresh, None
        return out

    def finish(self, proc: AttemptProcess, outcome: Outcome) -> UsageTotals:
        """The attempt's totals as it ends (see the module docstring); forgets it."""
        with self._lock:
            track = self._tracks.pop((proc.spec.task_id, proc.spec.attempt), None) or _Track()
        end = proc.exit_usage
        disk = track.disk_bytes
        try:
            disk = dir_size(proc.spec.cwd, self.config.max_disk_entries)
        except OSError:
            pass
        accel_sum, accel_n = track.accel
        return UsageTotals(
            cpu_s=round(max(track.cpu_s, end.cpu_s or 0.0), 3),
            peak_rss_bytes=max(track.peak_rss, end.maxrss_bytes or 0),
            peak_memory_bytes=end.peak_memory_bytes, disk_bytes=disk,
            accel_busy=round(accel_sum / accel_n, 4) if accel_n else None,
            oom_killed=outcome.kind is OutcomeKind.OOM_KILLED)


def _devices(proc: AttemptProcess) -> tuple[int, ...]:
    """The GPU indices the worker gave the attempt (runner.py writes them at launch)."""
    try:
        saved = json.loads((proc.spec.attempt_dir / "request.json").read_text())
        return tuple(int(d) for d in saved.get("devices", ()))
    except (OSError, ValueError, TypeError, AttributeError):
        return ()


def samples_for(taken: dict[Key, Reading], held: dict) -> list[dict]:
    """Readings as a report carries them (control.UsageSample), named by attempt id; `held`
    is the worker's book (attempt id -> Held, which knows its task id and number)."""
    ids = {(h.task_id, h.launch.attempt_number): attempt_id for attempt_id, h in held.items()}
    return [{"attempt_id": ids[key], **{k: v for k, v in dataclasses.asdict(r).items()
                                        if v is not None}}
            for key, r in taken.items() if key in ids]
