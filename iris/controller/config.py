"""Cluster configuration: the YAML an operator writes, read into frozen dataclasses.

Not live state: nothing here talks to a cloud or knows which slices exist. `load_config`
refuses anything it does not understand with a ConfigError whose message starts with the
key path ("regions.us-central2.scale_groups.v5e-16.max_slices: must be >= min_slices (2 < 4)"),
and unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from iris.base.errors import ConfigError, InvalidRequestError
from iris.base.resources import KNOWN_GPUS, tpu_shape
from iris.controller import config_providers as _providers
from iris.controller.config_providers import KubernetesGroup, KubernetesSite, SlurmGroup, SlurmSite
from iris.controller.config_reader import NAME as _NAME
from iris.controller.config_reader import REQUIRED as _REQUIRED
from iris.controller.config_reader import Section as _Section
from iris.controller.config_reader import bad_name as _bad_name
from iris.controller.regions.remote import check_region_actors

_ADDRESS = re.compile(r"^(tcp://[^\s:/]+:\d{1,5}|ipc://\S+)$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
ACCELERATOR_TYPES = ("tpu", "gpu", "cpu")
PROVIDER_KINDS = ("gcp", "slurm", "kubernetes", "local", "simulated")
# Providers whose slices live and die with the controller's process (worker processes it
# started, a simulated fleet): only the controller can list or stop them. Every other
# kind's slices outlive it, and the CLI reaches them through the provider itself.
IN_PROCESS_PROVIDERS = ("local", "simulated")
# The TPU VM image each family boots when the config names none (GCP docs, 2026).
_DEFAULT_RUNTIME = {
    "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}


@dataclass(frozen=True)
class ScaleGroupConfig:
    """A pool of identical slices in one region that the autoscaler grows and shrinks."""

    name: str
    region: str
    accelerator_type: str  # "tpu", "gpu" or "cpu"
    accelerator_variant: str | None  # "v5litepod-16", "H100"; None for cpu
    hosts_per_slice: int  # machines per slice; TPU groups derive it from the variant
    accelerators_per_host: int  # TPU chips or GPUs on each host; 0 for cpu
    zones: tuple[str, ...]  # where slices may be created, tried in this order
    min_slices: int = 0  # kept even when idle; 0 so an idle cluster costs nothing
    max_slices: int = 1  # hard cap; 1 so a forgotten key cannot run up a bill
    buffer_slices: int = 0  # idle slices kept warm to hide boot time (minutes on GCP)
    preemptible: bool = True  # most of the fleet is preemptible: it is 3-4x cheaper
    spot: bool = False  # spot capacity (no 24 h limit) instead of legacy preemptible
    priority: int = 0  # higher is scaled up first when several groups fit a request
    runtime_version: str | None = None  # TPU VM image; per-family default when None
    provider: str = "gcp"  # which Provider creates the slices (PROVIDER_KINDS)
    slurm: SlurmGroup | None = None  # how a slice is asked of Slurm (provider slurm)
    kubernetes: KubernetesGroup | None = None  # its pods (provider kubernetes)


@dataclass(frozen=True)
class RegionConfig:
    """One region: its zones and the scale groups its region actor owns."""

    name: str
    zones: tuple[str, ...]
    scale_groups: dict[str, ScaleGroupConfig] = field(default_factory=dict)
    slurm: SlurmSite | None = None  # set when its groups use provider slurm
    kubernetes: KubernetesSite | None = None  # set when its groups use provider kubernetes
    # The node serving this region's actor, when not the controller's (regions/remote.py).
    actor_address: str | None = None


@dataclass(frozen=True)
class StorageConfig:
    """Where task logs and controller state snapshots go. One of log_bucket / log_dir."""

    log_bucket: str | None = None  # GCS bucket name (no gs://) for task logs
    log_prefix: str = "iris/logs"  # object prefix inside log_bucket
    log_dir: str | None = None  # local directory instead of GCS (embedded clusters)
    snapshot_bucket: str | None = None  # GCS bucket for state snapshots; None = none taken
    snapshot_prefix: str = "iris/state"
    snapshot_interval_s: float = 300.0  # 5 min bounds what a lost controller disk costs
    # A burst of this many committed changes checkpoints early, at most every min_gap_s
    # (one checkpoint of 100,000 jobs took seconds here: bench/RESULTS.md).
    snapshot_after_changes: int = 1000
    snapshot_min_gap_s: float = 5.0
    snapshot_keep: int = 24  # newest checkpoints kept (2 h at the 5 min default)
    snapshot_keep_days: int = 7  # plus the newest of each of the last 7 days, for rollbacks


@dataclass(frozen=True)
class ControllerSection:
    """The `controller:` section of a cluster file: how workers and clients reach the
    controller. (Not service.ControllerConfig, the settings of a running controller.)"""

    address: str  # what others dial, e.g. tcp://10.128.0.2:7100
    bind: str | None = None  # what the controller binds; None = same as address
    state_dir: str | None = None  # SQLite state directory; None = the CLI's --state-dir
    # The controller's own VM, for `iris cluster start|stop` (config_vm.py); None: the
    # operator runs the controller somewhere else.
    vm: Any = None


@dataclass(frozen=True)
class GcpConfig:
    """GCP project settings shared by every gcp scale group."""

    project: str
    service_account: str | None = None  # None = the project's default compute account
    network: str = "default"
    subnetwork: str | None = None
    iris_package: str = "iris"  # pip requirement the startup script installs on workers
    startup_script: str | None = None  # path of the template; None = deploy/worker-startup.sh


# Keys of the optional top-level `autoscaler:` section, all in seconds.
AUTOSCALER_KEYS = ("scale_up_delay_s", "scale_down_delay_s", "backoff_initial_s",
                   "backoff_max_s", "churn_window_s", "churn_cooldown_s", "boot_timeout_s",
                   "host_lost_grace_s", "poll_interval_s")


@dataclass(frozen=True)
class ClusterConfig:
    """The whole cluster: named, with a controller, storage and regions."""

    name: str
    controller: ControllerSection
    storage: StorageConfig
    regions: dict[str, RegionConfig]
    gcp: GcpConfig | None = None
    # Overrides of the autoscaler's timings (AUTOSCALER_KEYS); empty = its defaults.
    autoscaler: dict[str, float] = field(default_factory=dict)

    def scale_groups(self) -> list[ScaleGroupConfig]:
        return [g for r in self.regions.values() for g in r.scale_groups.values()]

    def scale_group(self, name: str) -> ScaleGroupConfig:
        for group in self.scale_groups():
            if group.name == name:
                return group
        raise ConfigError(f"no scale group named {name!r}")


_GROUP_KEYS = ("accelerator_type", "accelerator_variant", "hosts_per_slice",
               "accelerators_per_host", "zones", "min_slices", "max_slices", "buffer_slices",
               "preemptible", "spot", "priority", "runtime_version", "provider", "slurm",
               "kubernetes")


def _accelerator(sec: _Section) -> tuple[str, str | None, int, int]:
    """(type, variant, hosts_per_slice, accelerators_per_host), checked against each other."""
    kind = sec.get("accelerator_type", str)
    variant = sec.get("accelerator_variant", str, None)
    hosts = sec.get("hosts_per_slice", int, None)
    per_host = sec.get("accelerators_per_host", int, None)
    if kind == "tpu":
        if variant is None:
            raise ConfigError(f"{sec.key('accelerator_variant')}: required for a tpu group")
        try:
            shape = tpu_shape(variant)
        except InvalidRequestError as exc:
            raise ConfigError(f"{sec.key('accelerator_variant')}: {exc}") from exc
        for key, given, derived in (("hosts_per_slice", hosts, shape.hosts),
                                    ("accelerators_per_host", per_host, shape.chips_per_host)):
            if given is not None and given != derived:
                raise ConfigError(f"{sec.key(key)}: {variant} has {derived}, not {given}")
        return kind, variant, shape.hosts, shape.chips_per_host
    if kind == "gpu":
        if variant not in KNOWN_GPUS:
            raise ConfigError(f"{sec.key('accelerator_variant')}: unknown gpu {variant!r} "
                              f"(known: {', '.join(KNOWN_GPUS)})")
        per_host = 8 if per_host is None else per_host  # 8 GPUs: the usual a3/a2 machine
    elif kind == "cpu":
        if variant is not None:
            raise ConfigError(f"{sec.key('accelerator_variant')}: a cpu group has no variant")
        per_host = 0 if per_host is None else per_host
    else:
        raise ConfigError(f"{sec.key('accelerator_type')}: must be one of "
                          f"{', '.join(ACCELERATOR_TYPES)}, got {kind!r}")
    if hosts is None or hosts < 1:
        raise ConfigError(f"{sec.key('hosts_per_slice')}: a {kind} group needs an int >= 1")
    return kind, variant, hosts, per_host


def _scale_group(data: Any, path: str, name: str, region: RegionConfig) -> ScaleGroupConfig:
    sec = _Section(data, path, _GROUP_KEYS)
    kind, variant, hosts, per_host = _accelerator(sec)
    zones = sec.zones("zones", None) or region.zones
    for zone in zones:
        if zone not in region.zones:
            raise ConfigError(f"{sec.key('zones')}: {zone!r} is not a zone of region "
                              f"{region.name} ({', '.join(region.zones)})")
    lo, hi, buf = sec.count("min_slices", 0), sec.count("max_slices", 1), sec.count("buffer_slices", 0)
    if hi < lo:
        raise ConfigError(f"{sec.key('max_slices')}: must be >= min_slices ({hi} < {lo})")
    if buf > hi:
        raise ConfigError(f"{sec.key('buffer_slices')}: must be <= max_slices ({buf} > {hi})")
    preemptible, spot = sec.get("preemptible", bool, True), sec.get("spot", bool, False)
    if spot and not preemptible:
        raise ConfigError(f"{sec.key('spot')}: spot capacity is preemptible; "
                          "set preemptible: true or drop spot")
    provider = sec.get("provider", str, "gcp")
    if provider not in PROVIDER_KINDS:
        raise ConfigError(f"{sec.key('provider')}: must be one of {', '.join(PROVIDER_KINDS)}, "
                          f"got {provider!r}")
    runtime = sec.get("runtime_version", str, None)
    if runtime is None and kind == "tpu":
        runtime = _DEFAULT_RUNTIME[tpu_shape(variant).family]
    extra = {}
    if provider == "slurm":
        extra["slurm"] = _providers.slurm_group(_Section(sec.get(
            "slurm", dict, {}), sec.key("slurm"), _providers.SLURM_GROUP_KEYS))
    elif provider == "kubernetes":
        extra["kubernetes"] = _providers.kubernetes_group(_Section(sec.get(
            "kubernetes", dict, {}), sec.key("kubernetes"), _providers.KUBERNETES_GROUP_KEYS))
    return ScaleGroupConfig(
        name=name, region=region.name, accelerator_type=kind, accelerator_variant=variant,
        hosts_per_slice=hosts, accelerators_per_host=per_host, zones=zones, min_slices=lo,
        max_slices=hi, buffer_slices=buf, preemptible=preemptible, spot=spot,
        priority=sec.get("priority", int, 0), runtime_version=runtime, provider=provider,
        **extra)


def _region(data: Any, path: str, name: str, seen_groups: dict[str, str]) -> RegionConfig:
    sec = _Section(data, path, ("zones", "scale_groups", "slurm", "kubernetes",
                                "actor_address"))
    zones = sec.zones("zones")
    if not zones:
        raise ConfigError(f"{sec.key('zones')}: list at least one zone")
    address = sec.get("actor_address", str, None)
    region = RegionConfig(name=name, zones=zones, actor_address=address)
    groups = _Section(sec.get("scale_groups", dict, {}), sec.key("scale_groups"),
                      tuple(sec.data.get("scale_groups") or ()))
    for group_name, group_data in groups.data.items():
        key = groups.key(group_name)
        if not isinstance(group_name, str) or not _NAME.match(group_name):
            raise ConfigError(f"{key}: {_bad_name(group_name)}")
        if group_name in seen_groups:
            raise ConfigError(f"{key}: scale group names must be unique in the cluster; "
                              f"{group_name!r} is already in region {seen_groups[group_name]}")
        seen_groups[group_name] = name
        region.scale_groups[group_name] = _scale_group(group_data, key, group_name, region)
    if address is not None:  # checked as the controller checks it: the same message
        check_region_actors({name: address}, {name} if region.scale_groups else set(),
                            path="regions", suffix=".actor_address")
    kinds = sorted({g.provider for g in region.scale_groups.values()})
    if len(kinds) > 1:  # one region actor runs one provider for all its groups
        raise ConfigError(f"{sec.key('scale_groups')}: one region's groups must use one "
                          f"provider, got {', '.join(kinds)}")
    _providers.provider_sections(kinds[0] if kinds else "", sec, {
        groups.key(g): d for g, d in groups.data.items()})
    if kinds == ["slurm"]:
        region = replace(region, slurm=_providers.slurm_site(_Section(
            sec.get("slurm", dict, {}), sec.key("slurm"), _providers.SLURM_SITE_KEYS)))
    elif kinds == ["kubernetes"]:
        region = replace(region, kubernetes=_providers.kubernetes_site(_Section(
            sec.get("kubernetes", dict, {}), sec.key("kubernetes"),
            _providers.KUBERNETES_SITE_KEYS)))
    return region


def _autoscaler(data: Any) -> dict[str, float]:
    """Autoscaler timings (seconds; autoscaler.AutoscalerConfig has the defaults and why)."""
    sec = _Section(data, "autoscaler", AUTOSCALER_KEYS)
    out = {}
    for key in sec.data:
        value = sec.get(key, (int, float))
        if value < 0:
            raise ConfigError(f"{sec.key(key)}: must be >= 0, got {value}")
        out[key] = float(value)
    return out


def _storage(data: Any) -> StorageConfig:
    sec = _Section(data, "storage", tuple(StorageConfig.__dataclass_fields__))
    bucket, log_dir = sec.get("log_bucket", str, None), sec.get("log_dir", str, None)
    if (bucket is None) == (log_dir is None):
        raise ConfigError("storage.log_bucket: set exactly one of log_bucket or log_dir")
    for key in ("log_bucket", "snapshot_bucket"):
        value = sec.get(key, str, None)
        if value is not None and not _BUCKET.match(value):
            raise ConfigError(f"storage.{key}: {value!r} is not a GCS bucket name "
                              "(3-63 of a-z 0-9 . _ -, no gs:// prefix)")
    interval = sec.get("snapshot_interval_s", float, 300.0)
    if interval <= 0:
        raise ConfigError(f"storage.snapshot_interval_s: must be > 0, got {interval}")
    counts = {}
    for key, least in (("snapshot_after_changes", 1), ("snapshot_keep", 1),
                       ("snapshot_keep_days", 0)):
        counts[key] = sec.get(key, int, StorageConfig.__dataclass_fields__[key].default)
        if isinstance(counts[key], bool) or counts[key] < least:
            raise ConfigError(f"storage.{key}: must be an integer >= {least}, got {counts[key]}")
    gap = sec.get("snapshot_min_gap_s", float, 5.0)
    if gap < 0:
        raise ConfigError(f"storage.snapshot_min_gap_s: must be >= 0, got {gap}")
    prefix = sec.get("snapshot_prefix", str, "iris/state")
    if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", prefix):
        raise ConfigError(f"storage.snapshot_prefix: {prefix!r} must be '/'-separated names of "
                          "letters, digits, '.', '_' or '-', without leading or trailing '/'")
    return StorageConfig(
        log_bucket=bucket, log_prefix=sec.get("log_prefix", str, "iris/logs"), log_dir=log_dir,
        snapshot_bucket=sec.get("snapshot_bucket", str, None),
        snapshot_prefix=prefix, snapshot_interval_s=interval, snapshot_min_gap_s=gap, **counts,
    )


def _controller(data: Any, name: str, gcp: Any) -> ControllerSection:
    from iris.controller.config_vm import controller_vm

    sec = _Section(data, "controller", ("address", "bind", "state_dir", "vm"))
    for key in ("address", "bind"):
        value = sec.get(key, str, None if key == "bind" else _REQUIRED)
        if value is not None and not _ADDRESS.match(value):
            raise ConfigError(f"controller.{key}: {value!r} is not tcp://HOST:PORT or ipc://PATH")
    vm = sec.get("vm", dict, None)
    return ControllerSection(address=sec.data["address"], bind=sec.data.get("bind"),
                             state_dir=sec.get("state_dir", str, None),
                             vm=None if vm is None else controller_vm(
                                 _Section(vm, "controller.vm", _VM_KEYS), name, gcp,
                                 sec.data["address"]))


def _gcp(data: Any) -> GcpConfig:
    sec = _Section(data, "gcp", tuple(GcpConfig.__dataclass_fields__))
    return GcpConfig(**{k: sec.get(k, str, _REQUIRED if k == "project" else f.default)
                        for k, f in GcpConfig.__dataclass_fields__.items()})


_VM_KEYS = ("enabled", "name", "zone", "machine_type", "boot_image", "disk_size_gb", "port",
            "dashboard_port", "image")


def parse_config(data: Any) -> ClusterConfig:
    """A ClusterConfig from an already-parsed YAML tree (dicts, lists, scalars): the
    multi-region form, or the single-region form of the Iris README (config_seed.py)."""
    from iris.controller.config_seed import is_seed_form, normalize_seed

    if is_seed_form(data):
        data = normalize_seed(data)
    top = _Section(data, "", ("name", "controller", "storage", "gcp", "regions", "autoscaler"))
    regions_sec = _Section(top.get("regions", dict), "regions", tuple(top.data["regions"]))
    if not regions_sec.data:
        raise ConfigError("regions: list at least one region")
    seen: dict[str, str] = {}
    regions = {}
    for name, region in regions_sec.data.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"regions.{name}: {_bad_name(name)}")
        regions[name] = _region(region, f"regions.{name}", name, seen)
    name = top.name("name")
    gcp = _gcp(top.data["gcp"]) if top.data.get("gcp") is not None else None
    config = ClusterConfig(
        name=name, controller=_controller(top.get("controller", dict), name, gcp),
        storage=_storage(top.get("storage", dict)), regions=regions, gcp=gcp,
        autoscaler=_autoscaler(top.get("autoscaler", dict, {})),
    )
    gcp_groups = [g for g in config.scale_groups() if g.provider == "gcp"]
    if gcp_groups and config.gcp is None:
        raise ConfigError(f"gcp: required because scale group {gcp_groups[0].name} "
                          "uses provider gcp")
    if config.controller.vm is not None and config.controller.vm.enabled and gcp is None:
        raise ConfigError("gcp: required because controller.vm makes the controller's VM")
    return config


def load_config(source: str | Path) -> ClusterConfig:
    """Read a cluster config from a file (a Path, or a str without newlines) or YAML text."""
    origin = ""
    if isinstance(source, Path) or "\n" not in source:
        path = Path(source)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from exc
        origin = f"{path}: "
    else:
        text = source
    import yaml  # here, not at the top: task environments import iris without PyYAML

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}not valid YAML: {exc}") from exc
    try:
        return parse_config(data)
    except ConfigError as exc:
        if not origin:
            raise
        raise ConfigError(f"{origin}{exc}") from exc


def default_local_config(workers: int = 1, log_dir: str | None = None,
                         address: str = "tcp://127.0.0.1:0") -> ClusterConfig:
    """The embedded cluster: one region, one cpu group of `workers` local worker processes."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers: expected an int >= 1, got {workers!r}")
    region = RegionConfig(name="local", zones=("local",))
    region.scale_groups["local"] = ScaleGroupConfig(
        name="local", region="local", accelerator_type="cpu", accelerator_variant=None,
        hosts_per_slice=1, accelerators_per_host=0, zones=("local",), min_slices=workers,
        max_slices=workers, preemptible=False, provider="local",
    )
    return ClusterConfig(
        name="local", controller=ControllerSection(address=address),
        storage=StorageConfig(log_dir=log_dir or "iris-logs"), regions={"local": region},
    )


__all__ = [
    "ACCELERATOR_TYPES", "IN_PROCESS_PROVIDERS", "PROVIDER_KINDS", "ClusterConfig", "ControllerSection", "GcpConfig",
    "RegionConfig", "ScaleGroupConfig", "StorageConfig", "default_local_config", "load_config",
    "parse_config",
]
