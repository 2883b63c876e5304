"""The Slurm and Kubernetes sections of a cluster config: where a region's slices come from.

Not the providers (providers/slurm.py, providers/kubernetes.py use these) nor the rest of the
config (config.py calls these readers with sections already checked for unknown keys). A
region whose groups use `provider: slurm` is one Slurm cluster and its zones are partitions;
one whose groups use `provider: kubernetes` is one Kubernetes cluster (a namespace in it)
and its zones are the `topology.kubernetes.io/zone` values its nodes carry. Every setting
has a default that suits a site that changed nothing, so an empty section is valid:

    regions:
      campus:
        zones: [gpu, cpu]                      # Slurm partitions, tried in this order
        slurm: {work_dir: /shared/iris, conf: /etc/slurm/slurm.conf}
        scale_groups:
          h100x2:
            provider: slurm
            accelerator_type: gpu
            accelerator_variant: H100
            hosts_per_slice: 2
            slurm: {qos: normal, account: lab, gres: "gpu:h100:8", time_limit: "2-00:00:00"}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from iris.base.errors import ConfigError
from iris.controller.config_reader import Section

# Slurm's own words for a partition, account, QOS...: letters, digits, '_', '-', '.'.
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
# --mem: a number with an optional K/M/G/T suffix (Slurm's units: powers of 1024).
_SLURM_MEM = re.compile(r"^\d+[KMGT]?$")
# Kubernetes names (RFC 1123 labels) and quantities ("4", "500m", "16Gi").
_K8S_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_K8S_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")
# GKE's accelerator label values for TPU families (GKE TPU docs, 2026).
GKE_TPU_ACCELERATORS = {"v4": "tpu-v4-podslice", "v5litepod": "tpu-v5-lite-podslice",
                        "v5p": "tpu-v5p-slice", "v6e": "tpu-v6e-slice"}


@dataclass(frozen=True)
class SlurmSite:
    """`regions.<r>.slurm`: the Slurm cluster a region's slices are allocations of."""

    conf: str | None = None  # SLURM_CONF for sbatch/squeue/...; None = Slurm's own default
    bin_dir: str | None = None  # directory of sbatch, squeue...; None = found on $PATH
    user: str | None = None  # whose jobs are this cluster's; None = the controller's user
    # A directory every node sees at the same path (the shared home or scratch): the join
    # token (0600), each worker's work dir and the allocations' output live under it.
    work_dir: str = "~/.iris-slurm"
    # How a node starts Iris, as shell words; None = the controller's own interpreter
    # (`<python> -m iris`), right when its venv sits on the shared filesystem.
    iris_command: str | None = None
    # The address each worker binds and is reached at; None = the node's first address
    # (`hostname -I`), which suits one flat cluster network.
    worker_host: str | None = None
    partitions: dict[str, str] = field(default_factory=dict)  # zone -> partition if named apart
    # Variables of the controller's environment the allocations get (sbatch --export=...),
    # e.g. SSL_CERT_FILE for uv behind a site's TLS proxy; the rest stays out (NONE).
    export_env: tuple[str, ...] = ()
    # Slurm's commands answer in milliseconds; 30 s rides out a slurmctld restart or a busy
    # controller (its RPC queue) without hanging the autoscaler's list lane for long.
    command_timeout_s: float = 30.0
    # An allocation this close to its time limit takes no new work (it is drained, then
    # cancelled): 10 min lets most tasks finish instead of being killed at the limit.
    drain_before_end_s: float = 600.0

    def partition(self, zone: str) -> str:
        return self.partitions.get(zone, zone)


@dataclass(frozen=True)
class SlurmGroup:
    """`scale_groups.<g>.slurm`: how one slice of the group is asked of Slurm (sbatch)."""

    account: str | None = None
    qos: str | None = None
    constraint: str | None = None  # node features, e.g. "h100&ib"
    gres: str | None = None  # per node, e.g. "gpu:h100:8"; None = gpu:<accelerators_per_host>
    cpus_per_node: int | None = None  # None = Slurm's default (one CPU, or the whole node)
    mem_per_node: str | None = None  # e.g. "64G"; None = the partition's default
    time_limit: str | None = None  # e.g. "2-00:00:00"; None = the partition's default
    exclusive: bool = False  # whole nodes, shared with no other job
    sbatch_args: tuple[str, ...] = ()  # anything else the site needs, e.g. ["--reservation=x"]


@dataclass(frozen=True)
class KubernetesSite:
    """`regions.<r>.kubernetes`: the cluster and namespace a region's pods run in."""

    namespace: str = "iris"
    kubeconfig: str | None = None  # None = in-cluster service account, else ~/.kube/config
    context: str | None = None  # a kubeconfig context; None = its current one
    # The worker image. Without Iris in it, `iris_package` is pip-installed at pod start.
    image: str = "python:3.11-slim"
    iris_package: str = "iris"  # "" = the image already has `iris`
    service_account: str | None = None  # the pods' service account; None = namespace default
    zone_label: str = "topology.kubernetes.io/zone"  # node label a slice's zone selects
    worker_port: int = 7200  # what each pod's worker binds (pods have their own IPs)


@dataclass(frozen=True)
class KubernetesGroup:
    """`scale_groups.<g>.kubernetes`: the pods of one slice of the group."""

    local_queue: str | None = None  # Kueue LocalQueue: the slice is one workload, gang-admitted
    # Labels a node must carry, e.g. a node pool's (pairs: the group stays hashable).
    node_selector: tuple[tuple[str, str], ...] = ()
    cpu: str = "1"  # requested per pod (Kubernetes quantity)
    memory: str = "2Gi"
    priority_class: str | None = None
    tpu_topology: str | None = None  # GKE topology selector; None = derived from the variant


def slurm_site(sec: Section) -> SlurmSite:
    partitions = sec.get("partitions", dict, {})
    for zone, name in partitions.items():
        if not isinstance(name, str) or not _SLURM_WORD.match(name):
            raise ConfigError(f"{sec.key('partitions')}.{zone}: {name!r} is not a Slurm "
                              "partition name")
    timeout = sec.get("command_timeout_s", float, SlurmSite.command_timeout_s)
    if timeout <= 0:
        raise ConfigError(f"{sec.key('command_timeout_s')}: must be > 0, got {timeout}")
    drain = sec.get("drain_before_end_s", float, SlurmSite.drain_before_end_s)
    if drain < 0:
        raise ConfigError(f"{sec.key('drain_before_end_s')}: must be >= 0, got {drain}")
    export = sec.get("export_env", list, [])
    for i, var in enumerate(export):
        if not isinstance(var, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            raise ConfigError(f"{sec.key('export_env')}[{i}]: {var!r} is not a variable name")
        if var.startswith(("IRIS_CLUSTER_TOKEN", "SLURM_")):
            raise ConfigError(f"{sec.key('export_env')}[{i}]: {var} may not be exported (the "
                              "job's environment is readable by anyone who can see the job)")
    user = sec.get("user", str, None)
    if user is not None and not _SLURM_WORD.match(user):
        raise ConfigError(f"{sec.key('user')}: {user!r} is not a user name")
    return SlurmSite(conf=sec.get("conf", str, None), bin_dir=sec.get("bin_dir", str, None),
                     user=user, work_dir=sec.get("work_dir", str, SlurmSite.work_dir),
                     iris_command=sec.get("iris_command", str, None),
                     worker_host=sec.get("worker_host", str, None),
                     partitions=dict(partitions), export_env=tuple(export),
                     command_timeout_s=timeout,
                     drain_before_end_s=drain)


SLURM_SITE_KEYS = tuple(SlurmSite.__dataclass_fields__)
SLURM_GROUP_KEYS = tuple(SlurmGroup.__dataclass_fields__)
KUBERNETES_SITE_KEYS = tuple(KubernetesSite.__dataclass_fields__)
KUBERNETES_GROUP_KEYS = tuple(KubernetesGroup.__dataclass_fields__)


def slurm_group(sec: Section) -> SlurmGroup:
    words = {}
    for key in ("account", "qos"):
        words[key] = sec.get(key, str, None)
        if words[key] is not None and not _SLURM_WORD.match(words[key]):
            raise ConfigError(f"{sec.key(key)}: {words[key]!r} is not a Slurm {key} name")
    time_limit = sec.get("time_limit", str, None)
    if time_limit is not None and not _SLURM_TIME.match(time_limit):
        raise ConfigError(f"{sec.key('time_limit')}: {time_limit!r} is not a Slurm time "
                          "(e.g. 90, 12:00:00 or 2-00:00:00)")
    mem = sec.get("mem_per_node", str, None)
    if mem is not None and not _SLURM_MEM.match(mem):
        raise ConfigError(f"{sec.key('mem_per_node')}: {mem!r} is not a Slurm size (e.g. 64G)")
    cpus = sec.get("cpus_per_node", int, None)
    if cpus is not None and cpus < 1:
        raise ConfigError(f"{sec.key('cpus_per_node')}: must be >= 1, got {cpus}")
    extra = sec.get("sbatch_args", list, [])
    if not all(isinstance(a, str) and a.startswith("-") for a in extra):
        raise ConfigError(f"{sec.key('sbatch_args')}: expected a list of sbatch options "
                          "(each starting with '-')")
    return SlurmGroup(constraint=sec.get("constraint", str, None),
                      gres=sec.get("gres", str, None), cpus_per_node=cpus, mem_per_node=mem,
                      time_limit=time_limit, exclusive=sec.get("exclusive", bool, False),
                      sbatch_args=tuple(extra), **words)


def kubernetes_site(sec: Section) -> KubernetesSite:
    namespace = sec.get("namespace", str, KubernetesSite.namespace)
    if not _K8S_NAME.match(namespace):
        raise ConfigError(f"{sec.key('namespace')}: {namespace!r} is not a Kubernetes name")
    port = sec.get("worker_port", int, KubernetesSite.worker_port)
    if not 0 < port < 65536:
        raise ConfigError(f"{sec.key('worker_port')}: must be 1-65535, got {port}")
    return KubernetesSite(
        namespace=namespace, kubeconfig=sec.get("kubeconfig", str, None),
        context=sec.get("context", str, None),
        image=sec.get("image", str, KubernetesSite.image),
        iris_package=sec.get("iris_package", str, KubernetesSite.iris_package),
        service_account=sec.get("service_account", str, None),
        zone_label=sec.get("zone_label", str, KubernetesSite.zone_label), worker_port=port)


def kubernetes_group(sec: Section) -> KubernetesGroup:
    queue = sec.get("local_queue", str, None)
    if queue is not None and not _K8S_NAME.match(queue):
        raise ConfigError(f"{sec.key('local_queue')}: {queue!r} is not a Kubernetes name")
    selector = sec.get("node_selector", dict, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
        raise ConfigError(f"{sec.key('node_selector')}: expected a mapping of label -> text")
    quantities = {}
    for key in ("cpu", "memory"):
        quantities[key] = str(sec.get(key, (str, int), getattr(KubernetesGroup, key)))
        if not _K8S_QUANTITY.match(quantities[key]):
            raise ConfigError(f"{sec.key(key)}: {quantities[key]!r} is not a Kubernetes "
                              "quantity (e.g. 4, 500m, 16Gi)")
    return KubernetesGroup(local_queue=queue, node_selector=tuple(sorted(selector.items())),
                           priority_class=sec.get("priority_class", str, None),
                           tpu_topology=sec.get("tpu_topology", str, None), **quantities)


def provider_sections(kind: str, region_sec: Section, group_secs: dict[str, Any]) -> None:
    """Refuse a provider section where its provider is not used (a typo'd kind would
    otherwise silently drop a whole section)."""
    for name in ("slurm", "kubernetes"):
        if region_sec.data.get(name) is not None and kind != name:
            raise ConfigError(f"{region_sec.key(name)}: this region's groups use provider "
                              f"{kind or 'none'}, not {name}")
    for key, data in group_secs.items():
        for name in ("slurm", "kubernetes"):
            if isinstance(data, dict) and data.get(name) is not None and \
                    data.get("provider", "gcp") != name:
                raise ConfigError(f"{key}.{name}: the group's provider is "
                                  f"{data.get('provider', 'gcp')}, not {name}")


__all__ = ["GKE_TPU_ACCELERATORS", "KUBERNETES_GROUP_KEYS", "KUBERNETES_SITE_KEYS",
           "KubernetesGroup", "KubernetesSite", "SLURM_GROUP_KEYS", "SLURM_SITE_KEYS",
           "SlurmGroup", "SlurmSite", "kubernetes_group", "kubernetes_site",
           "provider_sections", "slurm_group", "slurm_site"]
