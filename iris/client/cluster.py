"""Joining or starting a cluster: `iris.local_cluster()` and `iris.connect()`.

Not the runtime (iris.actors) nor the controller. The local cluster hosts the registry and
the controller in this process's node and starts N worker processes (`iris worker`), the
same programs operators run on real hosts; it waits until they have registered.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from iris.actors import ClusterContext, Node, NodeConfig, Security, tokens
from iris.actors.context import join, security_from_env
from iris.actors.current import current_context
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import ConfigError, InvalidRequestError, IrisError
from iris.base.resources import human_bytes, parse_size
from iris.logstore.config import LogStoreConfig
from iris.wire.states import ENV_CACHE_ENV

if TYPE_CHECKING:
    from iris.controller.regions.region import RegionScaling

# Worker processes get this long to register before local_cluster gives up.
_WORKER_START_S = 60.0



@dataclass(frozen=True)
class LocalShare:
    """What each local worker offers: `cpu` CPUs and `memory` bytes."""

    cpu: float
    memory: int

    def __str__(self) -> str:
        return f"cpu={self.cpu:g} memory={human_bytes(self.memory)}"


def local_share(workers: int, cpu: float | None = None,
                memory: int | str | None = None) -> LocalShare:
    """What each of `workers` local workers offers: what the user asked for, else this
    machine's CPUs (those this process may run on) and memory split evenly between them.

    Split, not each the whole machine: two workers that each claimed 8 CPUs on a 2-core
    laptop accepted 16 one-CPU tasks at once and ran them at an eighth of the speed, with
    nothing saying the machine was the limit. A worker never offers less than 1 CPU (a
    default task asks for 1), so 4 workers on 2 cores offer 1 each: oversubscribed, and
    `iris cluster start` prints what each offers.
    """
    if cpu is not None and (isinstance(cpu, bool) or not isinstance(cpu, int | float)
                            or not 0 < cpu < float("inf")):
        raise InvalidRequestError(f"worker_cpu: expected a number > 0, got {cpu!r}",
                                  "worker_cpu")
    memory_bytes = parse_size(memory, "worker_memory") if memory is not None else 0
    if memory is not None and memory_bytes <= 0:
        raise InvalidRequestError(f"worker_memory: expected a size > 0 like '8GiB', got "
                                  f"{memory!r}", "worker_memory")
    share = max(workers, 1)
    return LocalShare(
        cpu=float(cpu) if cpu is not None else max(1.0, float(_machine_cpus() // share)),
        memory=memory_bytes or _machine_memory() // share)


@contextmanager
def local_cluster(workers: int = 0, *, bind: str = "tcp://127.0.0.1:0",
                  security: Security | None = None, state_dir: str | Path | None = None,
                  worker_cpu: float | None = None, worker_memory: int | str | None = None,
                  worker_attrs: dict[str, str] | None = None,
                  stop_grace_s: float = 10.0, log_store: LogStoreConfig | None = None,
                  autoscale: Sequence[RegionScaling] = (),
                  env_cache: str | Path | None = None,
                  ) -> Iterator[ClusterContext]:
    """An embedded cluster on this machine, current inside the `with` block.

    `worker_cpu` and `worker_memory` (bytes, or a size like "8GiB") are what each local
    worker offers; by default this machine's CPUs and memory shared between the `workers`
    (see `local_share`). `autoscale`: regions whose scale groups grow and shrink through a
    provider (e.g. LocalProvider processes) on top of the `workers` started here.
    `env_cache`: where the workers keep task environments (uv venvs), one directory they all
    share so each is built once; default $IRIS_ENV_CACHE, else `envs` in the state dir.
    """
    if not isinstance(workers, int) or workers < 0:
        raise ConfigError(f"workers: expected an int >= 0, got {workers!r}")
    if env_cache is not None and (not isinstance(env_cache, (str, Path)) or env_cache == ""):
        raise ConfigError(f"env_cache: expected a directory path, got {env_cache!r}")
    share = local_share(workers, worker_cpu, worker_memory)
    with ExitStack() as stack:
        root = Path(state_dir) if state_dir else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="iris-local-")))
        node = Node(NodeConfig(bind=bind), security=security_from_env(security)).start()
        stack.callback(node.stop)
        # The local workers are the whole fleet: what they offer bounds every request.
        # The controller is imported only by a process that hosts one: `import iris` in a
        # task or a CLI verb does not pay for it (~0.4 s of a 0.7 s import).
        from iris.controller.main import host_controller
        from iris.controller.regions.capacity import Offer, offers_from_groups
        from iris.controller.service import ControllerConfig

        offers = offers_from_groups(g for r in autoscale for g in r.groups)
        if workers or not autoscale:
            offers += (Offer("local", (worker_attrs or {}).get("accelerator_type"),
                             int((worker_attrs or {}).get("accelerator_count", 0)), share.cpu,
                             share.memory),)
        host_controller(node, ControllerConfig(state_dir=root / "controller",
                                               stop_grace_s=stop_grace_s, log_store=log_store,
                                               offers=offers, autoscale=tuple(autoscale)))
        ctx = ClusterContext(node, node.address)
        token = (root / "controller" / tokens.CLUSTER_TOKEN_FILE).read_text().strip()
        envs = Path(env_cache or os.environ.get(ENV_CACHE_ENV) or root / "envs")
        procs = [_start_worker(node.address, root / f"worker-{i}", envs, share,
                               worker_attrs or {}, token) for i in range(workers)]
        # Unwound first: workers stop (and stop their attempts) while the controller they
        # report to is still up; then the node with the controller and registry.
        stack.callback(_stop_workers, procs)
        _wait_for_workers(ctx, procs, workers)
        with ctx:
            yield ctx


def _machine_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _machine_memory() -> int:
    """What a local worker can give a task: this machine's memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _start_worker(address: str, root: Path, envs: Path, share: LocalShare,
                  attrs: dict[str, str], token: str) -> subprocess.Popen:
    root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "iris", "worker", "--controller", address,
            "--work-dir", str(root), "--env-cache", str(envs), "--attr", f"cpu={share.cpu}",
            "--attr", f"memory={share.memory}", "--exit-with-parent"]
    for key, value in attrs.items():
        argv += ["--attr", f"{key}={value}"]
    log = open(root / "worker.log", "ab")  # noqa: SIM115 - the child owns it from here
    try:
        # Our own workers get the cluster token (their role) in their environment only.
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, tokens.ENV_TOKEN: token})
    finally:
        log.close()


def _wait_for_workers(ctx: ClusterContext, procs: list[subprocess.Popen], count: int) -> None:
    if not count:
        return
    for _ in range(int(_WORKER_START_S / 0.05)):
        listed = ctx.node.call(ctx.address, CONTROLLER_KEY, "list_workers",
                               timeout_s=30).result()
        if len(listed) >= count:
            return
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            log = Path(dead[0].args[dead[0].args.index("--work-dir") + 1]) / "worker.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise IrisError(f"a local worker exited during start-up "
                            f"(code {dead[0].returncode}):\n{tail}")
        ctx.node.clock.sleep(0.05)
    raise IrisError(f"only {len(listed)} of {count} local workers registered "
                    f"within {_WORKER_START_S} s")


def _stop_workers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: the worker stops its attempts with their grace
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def connect(address: str | None = None, *, namespace: str | None = None,
            bind: str | None = None, security: Security | None = None) -> ClusterContext:
    """Join the cluster at `address` (default: $IRIS_ADDRESS) and make it current.

    Usable as a context manager, which leaves the cluster at the end of the block.
    """
    ctx = join(address, namespace=namespace, bind=bind, security=security)
    current_context.set(ctx)
    return ctx

