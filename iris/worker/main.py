"""`iris worker`: run this host's Worker actor until told to stop, then leave cleanly.

Told to stop (SIGTERM, SIGINT, the machine's shutdown, which is systemd's SIGTERM, the
controller's `drain` at an operator's `iris worker drain`, or the exit of the process that
started it), the worker says goodbye BEFORE its node stops, so its work moves at once
instead of after the controller's 31 s silence rule:

1. the notice: every attempt directory gets the notice file (`iris.on_preempt` callbacks
   run) and the controller is told (`preemption_notice`, reason "worker stopping: SIGTERM",
   the grace as the time left): it places nothing more here, requeues the attempts and
   stops them with that grace; each task's next attempt starts elsewhere once this one
   has exited (at most one attempt of a task at a time);
2. the attempts' exits are reported as usual and acknowledged (the hand-back);
3. `goodbye`: the controller drops the worker from its list; then the node stops.

A controller that cannot be reached is not waited for: the attempts are stopped here, and
the controller's silence rule covers the rest. Each step has its own timeout, and the
process as a whole has one more (`serve`, _STOP_BOUND_S): whatever still hangs past it, the
threads' stacks go to its log (faulthandler) and it exits 1 rather than hold its host.
"""

from __future__ import annotations

import faulthandler
import fcntl
import logging
import os
import select
import signal
import socket
import threading
from pathlib import Path

from iris.actors import ClusterContext, Node, NodeConfig, Security, tokens
from iris.actors.keys import CONTROLLER_KEY, worker_key
from iris.base import signals
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import ConfigError, InvalidRequestError
from iris.base.ids import new_id
from iris.base.resources import Resources, tpu_shape
from iris.wire.states import ENV_CACHE_ENV
from iris.worker import preemption_notice as notices
from iris.worker import slurm_notice
from iris.worker.actor import Worker

_log = logging.getLogger(__name__)

# After the goodbye's grace (the attempts' SIGTERM -> SIGKILL) this much more for their exits
# to be acknowledged and the goodbye answered; past it the node stops regardless.
_GOODBYE_MARGIN_S = 10.0
# The notice (10 s), the goodbye (2 x 10 s grace + the margin), the node's stop (the
# attempts' 10 s grace, the watchdog's 10 s), and as much again for a loaded host.
_STOP_BOUND_S = 120.0


class StopEvent(threading.Event):
    """The event a worker (or controller) process waits on, with why it was set."""

    reason = "stopped"

    def __init__(self, exit_after_s: float | None = None):
        """`exit_after_s`: a whole process's stop (`serve`): once set, the process dumps its
        threads' stacks and exits 1 if it is still running this much later."""
        super().__init__()
        self._exit_after_s = exit_after_s

    def stop_because(self, reason: str) -> None:
        if not self.is_set():
            self.reason = reason
            if self._exit_after_s is not None:
                faulthandler.dump_traceback_later(self._exit_after_s, exit=True)
        self.set()


def request_stop(stop: threading.Event, reason: str) -> None:
    """Set `stop`, noting why when it can hold a reason."""
    if isinstance(stop, StopEvent):
        stop.stop_because(reason)
    else:
        stop.set()


def _worker_id(root: Path, given: str | None) -> str:
    """Keep the id across restarts, so the controller reconciles instead of seeing a stranger."""
    id_file = root / "worker_id"
    if given:
        return given
    if id_file.exists():
        return id_file.read_text().strip()
    worker_id = new_id("w-")
    root.mkdir(parents=True, exist_ok=True)
    id_file.write_text(worker_id)
    return worker_id


def _lock_work_dir(root: Path) -> int:
    """One worker per work directory: its id, attempts and lease live there."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "worker.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(f"work directory {root} is in use by another worker (pid {holder}): "
                          "give each worker on this host its own --work-dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _env_cache(path: Path) -> Path:
    """The task environment cache, made if missing; one that cannot be is refused here,
    before the worker registers, not at its first task."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--env-cache {path}: cannot keep task environments there "
                          f"({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"--env-cache {path}: not writable by this worker")
    return path


def advertised_resources(attributes: dict[str, str]) -> Resources:
    """What this host offers, for its own admission check: cpu, memory, and the
    accelerator its attributes name (a TPU slice type, or a GPU model with a count)."""
    accelerator = attributes.get("accelerator_type")
    extra: dict = {}
    if accelerator:
        try:
            tpu_shape(accelerator)
            extra["tpu"] = accelerator
        except InvalidRequestError:
            extra["gpu"] = accelerator
            extra["count"] = max(1, int(attributes.get("accelerator_count", "1")))
    try:
        return Resources(cpu=float(attributes["cpu"]), memory=int(float(attributes["memory"])),
                         **extra)
    except (InvalidRequestError, ValueError) as exc:
        raise ConfigError(f"worker attributes do not describe a host: {exc}") from exc


def visible_gpus(advertised: Resources) -> tuple[str, ...]:
    """The GPUs this worker was given, when its launcher chose them (Slurm's GRES, a
    container runtime): CUDA_VISIBLE_DEVICES at start. Its tasks get subsets of these, by
    their names, never the whole machine's 0..N-1. () = not set: 0..N-1 of the host."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not advertised.gpu or not given:
        return ()
    names = tuple(d.strip() for d in given.split(",") if d.strip())
    if len(names) < advertised.count:
        raise ConfigError(f"this worker advertises {advertised.count} {advertised.gpu} GPUs "
                          f"but CUDA_VISIBLE_DEVICES names {len(names)} ({given})")
    return names


def parse_attrs(pairs: list[str]) -> dict[str, str]:
    attrs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--attr {pair!r}: expected key=value")
        attrs[key] = value
    return attrs


def _derive_chips(attributes: dict[str, str]) -> None:
    """A TPU host that names only its slice type gets its chip count from the type (a
    v5litepod-16 host has 4), so the scheduler sees the chips it may place on it."""
    accelerator = attributes.get("accelerator_type")
    if accelerator and "accelerator_count" not in attributes:
        try:
            attributes["accelerator_count"] = str(tpu_shape(accelerator).chips_per_host)
        except InvalidRequestError:
            pass  # a GPU model: its count is given, or 1 (advertised_resources)


def _host_attributes(region: str, given: dict[str, str]) -> dict[str, str]:
    """What this host says of itself at registration; `given` (--attr) wins."""
    attributes = {"region": region, "cpu": str(os.cpu_count() or 1),
                  "hostname": socket.gethostname(), "pid": str(os.getpid()),
                  "memory": str(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")),
                  **given}
    _derive_chips(attributes)
    return attributes


def run_worker(controller: str, *, region: str = "local", attrs: dict[str, str] | None = None,
               root: Path | None = None, worker_id: str | None = None,
               bind: str = "tcp://127.0.0.1:0", keys_dir: str | None = None,
               grace_s: float = 10.0, ready: threading.Event | None = None,
               stop: threading.Event | None = None, token: bytes | None = None,
               preemption_notice: str = "auto", warm: bool = False,
               env_cache: Path | None = None) -> None:
    """`env_cache`: where task environments live (default $IRIS_ENV_CACHE, else under
    `root`); every worker of a machine may share one (envs.py)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    root = root or Path(os.environ.get("IRIS_WORKER_DIR", "/tmp/iris-worker"))
    env_cache = _env_cache(env_cache or Path(os.environ.get(ENV_CACHE_ENV) or root / "envs"))
    lock = _lock_work_dir(root)  # held while this worker runs
    worker_id = _worker_id(root, worker_id)
    attributes = _host_attributes(region, attrs or {})
    advertised = advertised_resources(attributes)
    gpu_devices = visible_gpus(advertised)
    # Under Slurm, its SIGTERM is the notice (slurm_notice.py), and it reaches the tasks too.
    slurm = preemption_notice == "slurm" or (preemption_notice == "auto"
                                             and slurm_notice.in_slurm_job())
    task_env = ((slurm_notice.ENV_NOTICE_WAIT, str(slurm_notice.NOTICE_WAIT_S)),) if slurm \
        else ()
    token = token or tokens.from_env()  # read before any task could inherit it
    security = Security.load(keys_dir) if keys_dir else None
    if keys_dir:  # a task reaches the cluster with this host's keys (submit, spawn, resolve)
        task_env += (("IRIS_KEYS_DIR", str(Path(keys_dir).resolve())),)
    node = Node(NodeConfig(bind=bind), security=security).start()
    ctx = ClusterContext(node, controller, namespace="/", owns_node=True)
    stop = stop or StopEvent()
    watcher = None
    try:
        # Hosted, not registered: the controller calls a worker at the address it registered
        # with, so a registry name (and its renewal every second) would only double each
        # host's traffic (issue 21); `iris worker list` is where workers are listed.
        hosted = node.host(worker_key(worker_id), Worker, (
            worker_id, controller, CONTROLLER_KEY, attributes, root, node, advertised,
            grace_s, token, task_env, gpu_devices, warm),
            {"on_drain": lambda why: request_stop(stop, why), "env_root": env_cache})
        responder = notices.NoticeResponder(node, controller, CONTROLLER_KEY, worker_id, root,
                                            token)
        worker = hosted.instance
        node.post_to(worker_key(worker_id), worker.on_tick)  # register now, not at a tick
        watcher = slurm_notice.SlurmNotice(
            responder, stop, on_signal=worker.machine_ending,
            on_sent=worker.notice_sent).install() if slurm else \
            notices.start_watching(preemption_notice, responder)
        print(f"worker {worker_id} serving at {node.address}", flush=True)
        if ready is not None:
            ready.set()
        signals.wait_for(stop)  # in slices: a SIGTERM taken by another thread (signals.py)
        if watcher is not None:
            watcher.stop()
        _leave(node, worker_key(worker_id), hosted.instance, responder, grace_s,
               getattr(stop, "reason", "stopped"))
    finally:
        if watcher is not None:
            watcher.stop()
        started = SYSTEM_CLOCK.monotonic()
        ctx.close()
        _log.info("stop: node stopped (%.1f s)", SYSTEM_CLOCK.monotonic() - started)
        os.close(lock)


def serve(*, controller: str | None, address: str | None, region: str, attr: list[str],
          work_dir: Path | None, worker_id: str | None, bind: str, keys: str | None,
          token_file: Path | None, preemption_notice: str, warm: bool,
          exit_with_parent: bool, env_cache: Path | None = None) -> int:
    """`iris worker --controller ADDR ...`: the options as the command takes them
    (command.py, or the CLI), until told to stop."""
    controller = controller or address
    if not controller:
        raise SystemExit("iris worker: --controller ADDR is required")
    stop = StopEvent(exit_after_s=_STOP_BOUND_S)
    install_stop_signals(stop)
    if exit_with_parent:
        stop_with_parent(os.getppid(), stop)
    token = tokens.read(token_file) if token_file else None
    run_worker(controller, region=region, attrs=parse_attrs(attr), root=work_dir,
               worker_id=worker_id, bind=bind, keys_dir=keys, stop=stop, token=token,
               preemption_notice=preemption_notice, warm=warm, env_cache=env_cache)
    return 0


def _leave(node: Node, key: str, worker: Worker, responder: notices.NoticeResponder,
           grace_s: float, why: str) -> None:
    """Say goodbye while the node still runs (the module docstring's steps 1-3); returns once
    the controller has been told, or could not be."""
    _log.warning("worker stopping (%s): handing its attempts back, then goodbye", why)
    started = SYSTEM_CLOCK.monotonic()
    done = threading.Event()
    told = responder(notices.Notice(f"worker stopping: {why}", SYSTEM_CLOCK.wall() + grace_s))
    _log.info("stop: notice %s (%.1f s)", "sent" if told else "failed",
              SYSTEM_CLOCK.monotonic() - started)
    if not node.post_to(key, worker.leave, done, grace_s, told):
        _log.info("stop: leave not run (the worker actor is gone)")
    elif done.wait(2 * grace_s + _GOODBYE_MARGIN_S):
        _log.info("stop: leave done (%.1f s)", SYSTEM_CLOCK.monotonic() - started)
    else:
        _log.info("stop: leave gave up after %.1f s", SYSTEM_CLOCK.monotonic() - started)


def stop_with_parent(parent_pid: int, stop: threading.Event) -> None:
    """Set `stop` when process `parent_pid` exits: a local cluster's workers must not
    outlive the process that started them, however it died (SIGKILL included)."""
    try:
        fd = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        request_stop(stop, f"the process that started it (pid {parent_pid}) is gone")
        return

    def watch() -> None:
        select.select([fd], [], [])  # readable once the process has exited
        os.close(fd)
        request_stop(stop, f"the process that started it (pid {parent_pid}) exited")

    threading.Thread(target=watch, daemon=True, name="iris-parent-watch").start()


def install_stop_signals(stop: threading.Event) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda n, _: request_stop(stop, signal.Signals(n).name))
