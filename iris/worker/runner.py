"""The attempt runner of one host: fencing, admission, workspace, environment and process
start and stop, put together. Not the Worker actor (no sockets, no registration): the actor
calls these blocking methods from an executor and turns the callbacks into messages.

An attempt goes: claimed (fenced by attempt number; an older attempt of the task still
running is stopped first) -> admitted (the worker never runs more than it advertises) ->
BUILDING (bundle unpacked, venv built or found; uv's output handed on line by line as the
`build` stream; a failed build raises with uv's text and releases everything) -> RUNNING (an AttemptProcess) -> ended
(on_exit with the Outcome, then resources released and the attempt directory removed).
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import InvalidRequestError, IrisError
from iris.base.resources import Resources
from iris.wire.bundles import BundleError
from iris.wire.states import CLUSTER_MARK_ENV
from iris.worker.adoption import Leftover, LeftoverAction, adopt_or_kill, sweep_unrecorded
from iris.worker.bundle_cache import BundleCache
from iris.worker.capacity import CapacityLedger
from iris.worker.cgroups import CgroupHost
from iris.worker.envs import EnvConfig, EnvironmentCache, read_requirements_file
from iris.worker.fencing import AttemptTable
from iris.worker.outcome import Outcome
from iris.worker.output import OnOutput
from iris.worker.process import DEFAULT_GRACE_S, AttemptProcess, AttemptSpec, popen_spawner
from iris.worker.records import AttemptRecord
from iris.worker.zygote import Spawner, ZygoteError, ZygotePool, subprocess_callable_spawner

_log = logging.getLogger(__name__)
_REQUEST_NAME = "request.json"
# How long a new attempt waits for an older one of its task that is still starting (building
# its environment, which uv can take minutes for) before it is refused.
_OLDER_START_WAIT_S = 300.0
_DEFAULT_ENV = (("PATH", "/usr/local/bin:/usr/bin:/bin"), ("LANG", "C.UTF-8"),
                ("PYTHONUNBUFFERED", "1"))  # unbuffered: logs must reach GCS while it runs


def default_base_env() -> tuple[tuple[str, str], ...]:
    """Every task's starting environment: _DEFAULT_ENV, plus the mark of the cluster that
    started this worker, if one did (wire/states.py), so its tasks are found by it too."""
    mark = os.environ.get(CLUSTER_MARK_ENV)
    return _DEFAULT_ENV + (((CLUSTER_MARK_ENV, mark),) if mark else ())


# What a zygote imports before it forks attempts: Iris's public API, which `import iris` loads
# on first use only, so each forked attempt that calls it does not import it again.
TASK_API = ("iris.actors", "iris.backends", "iris.client")


class AttemptState(enum.Enum):
    BUILDING = "building"
    RUNNING = "running"


@dataclass(frozen=True)
class RunnerConfig:
    root: Path  # attempts/, envs/ and bundles/ live under it
    grace_s: float = DEFAULT_GRACE_S  # SIGTERM -> SIGKILL; the default of 10 s
    use_zygote: bool = True  # callables fork from a per-env zygote (~4 ms vs ~100+ ms)
    base_env: tuple[tuple[str, str], ...] = field(default_factory=default_base_env)
    env_config: EnvConfig | None = None  # None: EnvConfig(env_root)
    # Where task environments live: None = root / "envs"; a directory shared by every worker
    # of the machine builds each venv once (`iris worker --env-cache DIR`).
    env_root: Path | None = None
    # The names of this host's GPUs as its tasks must see them (index i -> name), when its
    # launcher gave the worker only some (Slurm's GRES: "4,5,6,7"); () = 0..N-1.
    gpu_devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttemptRequest:
    """One attempt to run: a command or a cloudpickled (fn, args, kwargs), not both."""

    task_id: str
    attempt: int
    resources: Resources = field(default_factory=Resources)
    command: tuple[str, ...] = ()
    payload: bytes | None = None
    pip: tuple[str, ...] = ()
    bundle: str | None = None  # sha256 of a workspace bundle (see bundles.py)
    env: Mapping[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if bool(self.command) == (self.payload is not None):
            raise InvalidRequestError("give exactly one of command or payload", "command")
        if self.command and not all(isinstance(a, str) for a in self.command):
            raise InvalidRequestError("command: every argument must be a string", "command")


def _dir_name(task_id: str, attempt: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)[-60:]
    return f"{safe}-{hashlib.sha256(task_id.encode()).hexdigest()[:8]}.{attempt}"


OnState = Callable[[AttemptState], None]
OnExit = Callable[[AttemptProcess, Outcome], None]


class AttemptRunner:
    """Runs task attempts on this host. Thread-safe; `start` and `stop` block."""

    def __init__(self, config: RunnerConfig, advertised: Resources, *,
                 cgroups: CgroupHost | None = None, clock: Clock = SYSTEM_CLOCK,
                 fetch_bundle: Callable[[str], bytes] | None = None):
        self.config = config
        self.attempts_root = config.root / "attempts"
        self.attempts_root.mkdir(parents=True, exist_ok=True)
        self.envs = EnvironmentCache(config.env_config or EnvConfig(
            # Resolved: a venv's scripts and its .pth hold absolute paths, and `envs` may be a
            # link to a cache that outlives this work dir (Slurm slices share one per node).
            root=(config.env_root or config.root / "envs").resolve()))
        self.bundles = BundleCache(config.root / "bundles")
        self._cgroups = cgroups
        self._clock = clock
        self._fetch_bundle = fetch_bundle
        self._zygotes = ZygotePool(dict(config.base_env), preload=TASK_API)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # an attempt registered or ended
        self._table = AttemptTable()
        self._ledger = CapacityLedger(advertised)
        self._procs: dict[tuple[str, int], AttemptProcess] = {}
        self._closed = False

    def start(self, req: AttemptRequest, on_output: OnOutput | None = None,
              on_state: OnState | None = None, on_exit: OnExit | None = None
              ) -> AttemptProcess:
        """Run `req`; refusals (stale, duplicate, no capacity, bad input) change nothing."""
        req.validate()
        key = (req.task_id, req.attempt)
        self._end_older(req)
        with self._lock:
            self._table.check_claimable(req.task_id, req.attempt)
            self._ledger.admit(f"{req.task_id}#{req.attempt}", req.resources)
            self._table.claim(req.task_id, req.attempt)
            self._table.launched(req.task_id, req.attempt)
        try:
            proc = self._launch(req, on_output, on_state or (lambda s: None), on_exit)
        except BaseException:
            self._release(key)
            raise
        return proc

    def _end_older(self, req: AttemptRequest) -> None:
        """Stop this task's older attempts and wait until they have ended: at most one attempt
        of a task at a time, even across a retry or a reused job name. One may still be
        starting (not yet in `_procs`: its stop waits until it runs, attempts.py); wait for
        it to run or end, up to _OLDER_START_WAIT_S, then `launched` refuses as before."""
        deadline = self._clock.monotonic() + _OLDER_START_WAIT_S
        while True:
            with self._lock:
                self._table.check_claimable(req.task_id, req.attempt)
                older = [p for (t, _), p in self._procs.items() if t == req.task_id]
                starting = not older and bool(self._table.running_of(req.task_id))
            for proc in older:
                proc.stop(self.config.grace_s)
            left = deadline - self._clock.monotonic()
            if not older and (not starting or left <= 0):
                return
            if starting:
                with self._changed:  # woken when an attempt registers or ends
                    self._changed.wait(min(left, 1.0))

    def _launch(self, req: AttemptRequest, on_output: OnOutput | None, on_state: OnState,
                on_exit: OnExit | None) -> AttemptProcess:
        attempt_dir = self.attempts_root / _dir_name(req.task_id, req.attempt)
        shutil.rmtree(attempt_dir, ignore_errors=True)
        workdir = attempt_dir / "work"
        workdir.mkdir(parents=True)
        key = f"{req.task_id}#{req.attempt}"
        with self._lock:
            devices = self._ledger.devices(key)
        (attempt_dir / _REQUEST_NAME).write_text(json.dumps(
            {**req.resources.to_dict(), "devices": list(devices)}))
        on_state(AttemptState.BUILDING)
        pip = list(req.pip)
        if req.bundle:
            self._materialize(req.bundle, workdir)
            if (workdir / "requirements.txt").is_file():
                pip += read_requirements_file(workdir / "requirements.txt")
        env = self.envs.get(pip, progress=self._build_output(on_output))
        task_env = env.activate({**dict(self.config.base_env), **req.env})
        if req.resources.gpu:
            # The GPUs this host gave the attempt (capacity.py), never another task's.
            names = self.config.gpu_devices
            task_env["CUDA_VISIBLE_DEVICES"] = ",".join(
                names[d] if d < len(names) else str(d) for d in devices)
        if req.payload is not None:
            task_env["IRIS_RESULT_PATH"] = str(attempt_dir / "result.pkl")
        spec = AttemptSpec(task_id=req.task_id, attempt=req.attempt, attempt_dir=attempt_dir,
                           cwd=workdir, env=task_env,
                           memory_limit_bytes=req.resources.memory_bytes)
        with self._lock:  # a build can outlast the worker: close() may have run meanwhile
            if self._closed:
                raise IrisError(f"attempt {req.task_id}#{req.attempt} not started: the "
                                "worker is stopping")
        proc = AttemptProcess.launch(spec, self._spawner(req, str(env.python)), on_output,
                                     cgroups=self._cgroups, clock=self._clock,
                                     on_exit=self._exit_handler(on_exit))
        with self._lock:
            self._procs[(req.task_id, req.attempt)] = proc
            closed_meanwhile = self._closed
            self._changed.notify_all()
        if closed_meanwhile:  # close() took its list before this process was in it
            proc.stop(self.config.grace_s)
        on_state(AttemptState.RUNNING)
        return proc

    def _build_output(self, on_output: OnOutput | None) -> Callable[[str], None]:
        """uv's lines go to the attempt's output as the `build` stream, apart from what the
        task prints (`iris job logs --build-logs` shows them)."""
        def progress(line: str) -> None:
            if on_output is not None:
                on_output("build", line.rstrip("\n").encode() + b"\n", self._clock.wall())
        return progress

    def _materialize(self, digest: str, workdir: Path) -> None:
        if self.bundles.path_for(digest) is None:
            if self._fetch_bundle is None:
                raise BundleError(f"bundle {digest[:12]} is not cached and no fetcher is set")
            self.bundles.unpack(digest, self._fetch_bundle(digest))
        self.bundles.materialize(digest, workdir)

    def _spawner(self, req: AttemptRequest, python: str) -> Spawner:
        if req.payload is None:
            return popen_spawner(list(req.command))
        if self.config.use_zygote:
            try:
                return self._zygotes.get(python).spawner(req.payload)
            except ZygoteError as exc:
                _log.warning("no zygote for %s (%s): starting a new interpreter", python, exc)
        return subprocess_callable_spawner(python, req.payload)

    def _exit_handler(self, on_exit: OnExit | None) -> OnExit:
        def handle(proc: AttemptProcess, outcome: Outcome) -> None:
            try:
                if on_exit is not None:
                    on_exit(proc, outcome)
            finally:
                self._release((proc.spec.task_id, proc.spec.attempt))
                shutil.rmtree(proc.spec.attempt_dir, ignore_errors=True)
        return handle

    def _release(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._procs.pop(key, None)
            self._ledger.release(f"{key[0]}#{key[1]}")
            self._table.ended(*key)
            self._changed.notify_all()

    def stop(self, task_id: str, attempt: int, grace_s: float | None = None) -> Outcome:
        """Stop the current attempt of a task; a stale or unknown attempt is refused."""
        with self._lock:
            self._table.check(task_id, attempt)
            proc = self._procs.get((task_id, attempt))
        if proc is None:
            raise InvalidRequestError(f"task {task_id} attempt {attempt} is not running",
                                      "attempt")
        return proc.stop(self.config.grace_s if grace_s is None else grace_s)

    def running(self) -> dict[str, list[int]]:
        with self._lock:
            return self._table.running()

    def live(self) -> list[AttemptProcess]:
        """The attempts whose processes run now (for the usage sampler and inspection)."""
        with self._lock:
            return [p for p in self._procs.values() if p is not None]

    def process(self, task_id: str, attempt: int) -> AttemptProcess | None:
        """The running process of one attempt, None if it is not running here."""
        with self._lock:
            return self._procs.get((task_id, attempt))

    def free(self) -> dict[str, float]:
        with self._lock:
            return self._ledger.free()

    def warm(self) -> None:
        """Build (or find) the default environment and start its zygote now, so the first
        callable task forks at once instead of paying an interpreter's start (a new Slurm
        slice's first task: ~1 s on a loaded host). Blocks: run it off the actor's turn."""
        if not self.config.use_zygote:
            return
        try:
            self._zygotes.get(str(self.envs.get([]).python))
        except (IrisError, OSError) as exc:  # the first task builds it, and says why
            _log.warning("warming the default environment failed: %s", exc)

    def recover(self, adopt: bool | Callable[[AttemptRecord], bool] = False,
                on_output_for: Callable[[AttemptRecord], OnOutput | None] | None = None,
                on_exit: OnExit | None = None) -> list[Leftover]:
        """At worker start: adopt or kill what a previous worker left under attempts/."""
        found = []
        for attempt_dir in sorted(self.attempts_root.iterdir()):
            record = AttemptRecord.read(attempt_dir)
            if record is None:  # never started, or died before its record: sweep first
                sweep_unrecorded(attempt_dir)
                shutil.rmtree(attempt_dir, ignore_errors=True)
                continue
            sink = on_output_for(record) if on_output_for else None
            leftover = adopt_or_kill(attempt_dir, adopt, sink, cwd=attempt_dir / "work",
                                     clock=self._clock, on_exit=self._exit_handler(on_exit))
            if leftover is None:
                continue
            found.append(leftover)
            if leftover.action is LeftoverAction.ADOPTED:
                self._register_adopted(attempt_dir, leftover)
            else:
                shutil.rmtree(attempt_dir, ignore_errors=True)
        return found

    def _register_adopted(self, attempt_dir: Path, leftover: Leftover) -> None:
        record = leftover.record
        devices: tuple[int, ...] | None = None
        try:
            saved = json.loads((attempt_dir / _REQUEST_NAME).read_text())
            resources = Resources.from_dict(saved)
            devices = tuple(int(d) for d in saved.get("devices", ()))
        except (OSError, ValueError, TypeError, AttributeError, InvalidRequestError):
            resources = Resources(cpu=0)
        with self._lock:
            self._table.claim(record.task_id, record.attempt)
            self._table.launched(record.task_id, record.attempt)
            self._ledger.admit(f"{record.task_id}#{record.attempt}", resources, devices)
            self._procs[(record.task_id, record.attempt)] = leftover.process
        if leftover.process is not None and leftover.process.done:
            self._release((record.task_id, record.attempt))  # it ended while we registered

    def close(self) -> None:
        """Stop every attempt (grace period each, in parallel) and the zygotes. An attempt
        whose environment is still being built never starts (see `_launch`)."""
        with self._lock:
            self._closed = True
            procs = list(self._procs.values())
        threads = [threading.Thread(target=p.stop, args=(self.config.grace_s,)) for p in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._zygotes.close()
