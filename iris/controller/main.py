"""`iris controller serve`: host the registry and the controller in one process until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iris.actors import ClusterContext, Node, NodeConfig, Registry, Security, ports, tokens
from iris.actors.keys import CONTROLLER_KEY, INSPECT_KEY, region_key
from iris.actors.registry import REGISTRY_KEY, withdrawer
from iris.base import signals
from iris.base.errors import ConfigError, ConflictError, IrisError
from iris.controller.actor import Controller
from iris.controller.checkpoint.settings import CheckpointSettings, from_storage
from iris.controller.config import IN_PROCESS_PROVIDERS
from iris.controller.credentials import load_secret, proof_verifier
from iris.controller.inspector import Inspector
from iris.controller.regions.autoscaler import AutoscalerConfig
from iris.controller.regions.capacity import offers_from_groups
from iris.controller.regions.region import STOP_LOCAL_SLICES_S, RegionScaling
from iris.controller.report_fronts import check_fronts
from iris.controller.service import ControllerConfig
from iris.controller.state_lock import StateDirLock
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
    # Task attempts' names need their proofs (holders.py): the secret outlives a restart.
    registry = node.host(REGISTRY_KEY, Registry, (), {"verify": proof_verifier(
        lambda: load_secret(config.state_dir))})
    # Ended attempts' names leave the registry as the controller ends them (holders.py).
    node.host(CONTROLLER_KEY, Controller, (config, node, withdrawer(registry)))
    # Looking inside tasks (issue 31): calls workers with their command tokens.
    node.host(INSPECT_KEY, Inspector, (node,))


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
        out.append(RegionScaling(name, groups, make, config,
                                 in_process=kinds[0] in IN_PROCESS_PROVIDERS))
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
                  ) -> tuple[CheckpointSettings | None, list[str]]:
    """Before the store opens: decide and check the restore (checkpoint/restore.py), claim the
    checkpoint prefix (checkpoint/ownership.py), then put the restore in place. Returns the
    settings, holding the claimed lease, and the lines to print: the restore line first,
    then what the claim found. A refused restore (no such checkpoint, a corrupt one) raises
    before the claim, so the prefix's OWNER lease is left as it was found; ConflictError if
    another live controller owns the prefix and `take_over` is False."""
    settings = from_storage(cluster.storage if cluster else None)
    if settings is None:
        if restore not in (None, "none"):
            raise ConfigError("--restore: the config names no storage.snapshot_bucket to "
                              "restore from")
        if take_over:
            raise ConfigError("--take-over: the config names no storage.snapshot_bucket "
                              "whose checkpoints this controller would own")
        return None, []
    from iris.controller.checkpoint.ownership import Lease, Owner
    from iris.controller.checkpoint.restore import stage

    bucket = settings.open()
    staged = stage(Path(state_dir), bucket, restore, now)  # every refusal: before the claim
    # The address a second controller probes to tell whether this one still serves.
    concrete = bind and not bind.endswith(":0") and "0.0.0.0" not in bind and "*" not in bind
    address = bind if concrete else cluster.controller.address
    found: list[str] = []
    try:
        lease = Lease.claim(bucket, Owner.me(state_dir, address), take_over, say=found.append,
                            waiting=lambda line: print(line, flush=True))
    except BaseException:
        staged.discard()
        raise
    return replace(settings, lease=lease), [staged.commit(), *found]


def _refuse_taken(state_dir: Path, bind: str, now: float) -> StateDirLock:
    """First of all, before anything changes: one controller per state dir, and a bind
    address nobody holds. ConflictError naming the holder's pid otherwise."""
    lock = StateDirLock.take(state_dir, now)
    taken = ports.bind_error(bind)
    if taken:
        lock.release()
        raise ConflictError(taken)
    return lock


def run_controller(state_dir: Path, *, bind: str = "tcp://127.0.0.1:0",
                   keys_dir: str | None = None, stop: threading.Event | None = None,
                   worker_dead_after_s: float | None = None,
                   cluster: ClusterConfig | None = None,
                   on_start: Callable[[Node], Callable[[], None]] | None = None,
                   restore: str | None = None, take_over: bool = False,
                   report_fronts: int = 0) -> None:
    """Serve until `stop`. `on_start(node)` runs once the controller is up (the CLI starts the
    dashboard there: a higher layer, so it is handed in); it returns its own stop function.
    `restore`: None (a new, empty state dir restores the newest checkpoint), "latest", a
    checkpoint name, or "none" (see checkpoint/restore.py). `report_fronts`: helper
    processes taking the workers' reports (report_fronts.py); 0: none."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    from iris.base.clock import SYSTEM_CLOCK

    extra = _settings(cluster, Path(state_dir), worker_dead_after_s)  # config errors first
    check_fronts(report_fronts)
    # Then, before any socket: a taken state dir or address, a bad checkpoint or prefix
    # stops here, nothing started and nothing changed.
    lock = _refuse_taken(Path(state_dir), bind, SYSTEM_CLOCK.wall())
    checkpoints = None
    try:
        checkpoints, lines = restore_state(Path(state_dir), cluster, restore,
                                           SYSTEM_CLOCK.wall(), take_over, bind)
        if lines:  # the restore line first, then what the claim of the prefix found
            print(lines[0], flush=True)
            for line in lines[1:]:
                logging.getLogger(__name__).warning("%s", line)
        security = Security.load(keys_dir) if keys_dir else None
        node = Node(NodeConfig(bind=bind), security=security).start()
    except BaseException:
        if checkpoints is not None:  # the address was taken after all: give the prefix back
            checkpoints.lease.release(SYSTEM_CLOCK.wall())
        lock.release()
        raise
    try:
        lock.note_address(node.address)
        raise_open_files()
        tune_gc()
        fatal = _serve(node, ControllerConfig(state_dir=Path(state_dir),
                                              checkpoints=checkpoints,
                                              report_fronts=report_fronts,
                                              keys_dir=keys_dir, **extra),
                       stop or threading.Event(), on_start)
    finally:
        lock.release()
    if fatal:  # a supervisor restarts us from the state file; say why we went
        raise SystemExit(f"controller halted: {fatal[0]}")


def stop_in_process_slices(node: Node, config: ControllerConfig) -> list[dict]:
    """Before the node stops: the slices that live in this process (local worker processes)
    are stopped while the controller still serves, so their workers say goodbye and their
    work is requeued in the store, to run at once after a restart instead of after the
    restart grace. Cloud slices stay. What each region stopped."""
    futures = [node.call(node.address, region_key(s.region), "stop_slices", (True,),
                         timeout_s=STOP_LOCAL_SLICES_S) for s in config.autoscale if s.in_process]
    done = []
    for fut in futures:
        try:
            done.append(fut.result())
        except IrisError as exc:  # the provider's close at the node's stop stops them too
            logging.getLogger(__name__).warning("stopping local slices: %s", exc)
    for region in done:
        for row in region["deleted"]:
            print(f"stopped slice {row['slice_id']} ({region['region']}, "
                  f"{len(row['hosts'])} hosts)", flush=True)
    return done


def _settings(cluster: ClusterConfig | None, state_dir: Path,
              worker_dead_after_s: float | None) -> dict:
    """The ControllerConfig fields a cluster config gives (checked: ConfigError)."""
    extra: dict = {"log_store": log_store_from(cluster)}
    if cluster is not None:
        extra["offers"] = offers_from_groups(cluster.scale_groups())
        extra["autoscale"] = scaling_from_config(cluster, state_dir)
        extra["region_actors"] = {name: r.actor_address for name, r in cluster.regions.items()
                                  if r.actor_address is not None}
    if worker_dead_after_s is not None:
        extra["worker_dead_after_s"] = worker_dead_after_s
    return extra


def _serve(node: Node, config: ControllerConfig, stop: threading.Event,
           on_start: Callable[[Node], Callable[[], None]] | None) -> list[str]:
    """Host the controller in `node` until `stop`; why it had to stop, if it had to."""
    fatal: list[str] = []

    def on_fatal(reason: str) -> None:
        fatal.append(reason)
        stop.set()

    try:
        host_controller(node, replace(config, on_fatal=on_fatal))
        ctx = ClusterContext(node, node.address, owns_node=True)
        print(f"controller serving at {node.address} (state in {config.state_dir})",
              flush=True)
        stop_extra = on_start(node) if on_start else None
        try:
            signals.wait_for(stop)  # in slices: a SIGTERM taken by another thread
            stop_in_process_slices(node, config)
        finally:
            if stop_extra:
                stop_extra()
        ctx.close()
    finally:
        node.stop()
    return fatal
