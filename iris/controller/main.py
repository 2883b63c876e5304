"""`iris controller serve`: host the registry and the controller in one process until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iris.actors import ClusterContext, Node, NodeConfig, Registry, Security, tokens
from iris.actors.keys import CONTROLLER_KEY
from iris.actors.registry import REGISTRY_KEY
from iris.base.errors import ConfigError
from iris.controller.actor import Controller
from iris.controller.checkpoint import CheckpointSettings, from_storage
from iris.controller.regions.autoscaler import AutoscalerConfig
from iris.controller.regions.capacity import offers_from_groups
from iris.controller.regions.region import RegionScaling
from iris.controller.service import ControllerConfig
from iris.logstore.config import LogStoreConfig

if TYPE_CHECKING:  # the YAML parser is only needed by `iris controller serve --config`
    from iris.controller.config import ClusterConfig


# Files the controller keeps open besides its workers' connections: SQLite and its journal,
# log and checkpoint uploads, the dashboard's clients, ZeroMQ's own descriptors.
_FDS_FOR_ITSELF = 256


def raise_open_files() -> int:
    """Every worker holds a TCP connection to the controller, so the open-files limit caps
    the fleet: raise the soft limit to the hard one (no privilege needed) and say what that
    allows. Returns the workers it leaves room for."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            logging.getLogger(__name__).warning("cannot raise the open-files limit: %s", exc)
    room = max(0, soft - _FDS_FOR_ITSELF)
    logging.getLogger(__name__).info("open-files limit %d: room for about %d workers (raise "
                                     "LimitNOFILE / ulimit -Hn for more)", soft, room)
    return room


# The collector's young-generation threshold (CPython's default is 700 allocations). A
# controller of 10,000 hosts holds ~850,000 tracked objects and handles ~3,300 reports a
# second; at the default, short-lived report objects outlived two young collections, were
# promoted, and the oldest generation was collected every 1-5 s, each 100-200 ms with the
# GIL held, for 0 objects found (bench.fleet with a gc.callbacks probe: 115 such pauses
# in 3 minutes). At 50,000 they die young: no full collection in the next 5 minutes, and no
# young one over 80 ms. Cyclic garbage may wait longer to be found (at most 50,000 objects
# more); everything else is still freed at once by reference counting.
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    import gc

    _, mid, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, mid, old)


def host_controller(node: Node, config: ControllerConfig) -> None:
    """Serve the registry and the controller in `node` (the cluster's address is its address)."""
    node.host(REGISTRY_KEY, Registry)
    node.host(CONTROLLER_KEY, Controller, (config, node))


def log_store_from(cluster: ClusterConfig | None) -> LogStoreConfig | None:
    """The log store a cluster config names (storage.log_bucket or storage.log_dir)."""
    storage = cluster.storage if cluster else None
    if storage is None or not (storage.log_bucket or storage.log_dir):
        return None
    if storage.log_bucket:
        return LogStoreConfig(kind="gcs", bucket=storage.log_bucket, prefix=storage.log_prefix)
    return LogStoreConfig(kind="local", root=storage.log_dir, prefix=storage.log_prefix)


def scaling_from_config(cluster: ClusterConfig, state_dir: Path) -> tuple[RegionScaling, ...]:
    """One RegionScaling per region with scale groups; its provider is made once the
    controller's address is known (local workers must dial it)."""
    out = []
    for name, region in sorted(cluster.regions.items()):
        groups = tuple(region.scale_groups.values())
        if not groups:
            continue
        kinds = sorted({g.provider for g in groups})  # one per region (load_config checks)
        make = _provider_factory(kinds[0], cluster, name, Path(state_dir))
        # Simulated hosts run no worker, so READY alone means usable there.
        try:
            config = AutoscalerConfig(hosts_register=kinds[0] != "simulated",
                                      **cluster.autoscaler)
        except ValueError as exc:
            raise ConfigError(f"autoscaler: {exc}") from exc
        out.append(RegionScaling(name, groups, make, config))
    return tuple(out)


def _provider_factory(kind: str, cluster: ClusterConfig, region: str,
                      state_dir: Path) -> Callable[[str], Any]:
    def make(address: str) -> Any:
        from iris.controller.providers.factory import make_provider

        # The controller made its token at start: its workers on other hosts need it.
        token = "" if kind in ("local", "simulated") else tokens.read(
            state_dir / tokens.CLUSTER_TOKEN_FILE).hex()
        return make_provider(cluster, region, controller_address=address, cluster_token=token,
                             local_root=state_dir / "hosts")
    return make


def restore_state(state_dir: Path, cluster: ClusterConfig | None, restore: str | None,
                  now: float, take_over: bool = False, bind: str = "",
                  ) -> tuple[CheckpointSettings | None, str | None]:
    """Before the store opens: claim the checkpoint prefix (checkpoint/ownership.py), then
    restore a checkpoint if the config and `restore` say so (checkpoint/restore.py). Returns
    the settings, holding the claimed lease, and the line to print first. ConflictError if
    another live controller owns the prefix and `take_over` is False."""
    settings = from_storage(cluster.storage if cluster else None)
    if settings is None:
        if restore not in (None, "none"):
            raise ConfigError("--restore: the config names no storage.snapshot_bucket to "
                              "restore from")
        if take_over:
            raise ConfigError("--take-over: the config names no storage.snapshot_bucket "
                              "whose checkpoints this controller would own")
        return None, None
    from iris.controller.checkpoint.ownership import Lease, Owner
    from iris.controller.checkpoint.restore import prepare

    bucket = settings.open()
    # The address a second controller probes to tell whether this one still serves.
    concrete = bind and not bind.endswith(":0") and "0.0.0.0" not in bind and "*" not in bind
    address = bind if concrete else cluster.controller.address
    lease = Lease.claim(bucket, Owner.me(state_dir, address), take_over)
    return replace(settings, lease=lease), prepare(Path(state_dir), bucket, restore, now)


def run_controller(state_dir: Path, *, bind: str = "tcp://127.0.0.1:0",
                   keys_dir: str | None = None, stop: threading.Event | None = None,
                   worker_dead_after_s: float | None = None,
                   cluster: ClusterConfig | None = None,
                   on_start: Callable[[Node], Callable[[], None]] | None = None,
                   restore: str | None = None, take_over: bool = False) -> None:
    """Serve until `stop`. `on_start(node)` runs once the controller is up (the CLI starts the
    dashboard there: a higher layer, so it is handed in); it returns its own stop function.
    `restore`: None (a new, empty state dir restores the newest checkpoint), "latest", a
    checkpoint name, or "none" (see checkpoint/restore.py)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    from iris.base.clock import SYSTEM_CLOCK

    # First, before any socket: a bad checkpoint or prefix stops here, nothing started.
    checkpoints, origin = restore_state(Path(state_dir), cluster, restore, SYSTEM_CLOCK.wall(),
                                        take_over, bind)
    if origin:
        print(origin, flush=True)
    security = Security.load(keys_dir) if keys_dir else None
    raise_open_files()
    tune_gc()
    node = Node(NodeConfig(bind=bind), security=security).start()
    extra: dict = {"log_store": log_store_from(cluster), "checkpoints": checkpoints}
    if cluster is not None:
        extra["offers"] = offers_from_groups(cluster.scale_groups())
        extra["autoscale"] = scaling_from_config(cluster, Path(state_dir))
    if worker_dead_after_s is not None:
        extra["worker_dead_after_s"] = worker_dead_after_s
    stop = stop or threading.Event()
    fatal: list[str] = []

    def on_fatal(reason: str) -> None:
        fatal.append(reason)
        stop.set()

    extra["on_fatal"] = on_fatal
    try:
        host_controller(node, ControllerConfig(state_dir=Path(state_dir), **extra))
        ctx = ClusterContext(node, node.address, owns_node=True)
        print(f"controller serving at {node.address} (state in {state_dir})", flush=True)
        stop_extra = on_start(node) if on_start else None
        try:
            stop.wait()
        finally:
            if stop_extra:
                stop_extra()
        ctx.close()
    finally:
        node.stop()
    if fatal:  # a supervisor restarts us from the state file; say why we went
        raise SystemExit(f"controller halted: {fatal[0]}")
