"""KubernetesProvider: slices as indexed Jobs (Kueue-admitted gangs), via the official client.

Not the autoscaler, and not the manifests or their meaning (kubernetes_objects.py). A region
is one cluster (a namespace in it); a zone is a `topology.kubernetes.io/zone` value; a
scale group is a node pool (node selector) and, optionally, a Kueue LocalQueue. Creating a
slice creates one Job; deleting it deletes the Job and its pods (background propagation).
A list costs one call per kind whatever the number of slices: Jobs and pods of this
cluster (by label), Kueue Workloads when a group uses a queue, and Nodes (for cordons;
skipped if the role may not read them).

What it needs (deploy/kubernetes/rbac.yaml, checked by a test against the calls it makes):
in its namespace, `batch/jobs`: create, get, list, delete; `pods`: list; `secrets`: create,
update (the workers' token); `kueue.x-k8s.io/workloads`: list. Optionally, cluster-wide,
`nodes`: list.

Errors: 403 "exceeded quota" and 429 become CapacityError naming the zone; 409
ConflictError; the rest ProviderError, each raised `from` the client's exception.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from iris.base.errors import (
    CapacityError,
    ConfigError,
    ConflictError,
    InvalidRequestError,
    IrisError,
    ProviderError,
)
from iris.controller.config import ClusterConfig, ScaleGroupConfig
from iris.controller.config_providers import KubernetesSite
from iris.controller.providers.base import SliceInfo, check_create_request
from iris.controller.providers.kubernetes_objects import (
    KUEUE_JOB_UID,
    LABEL_CLUSTER,
    LABEL_GROUP,
    LABEL_SLICE,
    PodSlice,
    job_manifest,
    slice_from_objects,
    token_secret,
)

KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")
# Anonymous access to this API server instead of a kubeconfig (a fake, in tests).
ENV_API_SERVER = "IRIS_KUBERNETES_API"


@dataclass(frozen=True)
class KubernetesSettings:
    cluster: str
    region: str
    zones: tuple[str, ...]
    controller_address: str
    site: KubernetesSite = field(default_factory=KubernetesSite)
    cluster_token: str = field(default="", repr=False)
    uses_kueue: bool = False  # some group names a LocalQueue: Workloads are listed too


def make_api_client(site: KubernetesSite, host: str | None = None) -> Any:
    """The client's ApiClient: against `host` (or $IRIS_KUBERNETES_API) without auth, else
    the in-cluster service account, else the kubeconfig (site.kubeconfig, site.context)."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise ConfigError("kubernetes scale groups need the official client: "
                          "pip install 'iris[kubernetes]'") from exc
    host = host or os.environ.get(ENV_API_SERVER)
    if host:
        conf = client.Configuration()
        conf.host = host
        return client.ApiClient(conf)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config(config_file=site.kubeconfig, context=site.context)
        except (config.ConfigException, OSError) as exc:
            raise ConfigError(f"kubernetes: no in-cluster service account and no usable "
                              f"kubeconfig ({exc})") from exc
    return client.ApiClient()


class KubernetesProvider:
    """A Provider on a Kubernetes cluster; see the module docstring."""

    def __init__(self, settings: KubernetesSettings, *, api_client: Any = None):
        from kubernetes import client

        self._s = settings
        self._api = api_client or make_api_client(settings.site)
        self._batch = client.BatchV1Api(self._api)
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)
        self._ns = settings.site.namespace
        self._secret = f"iris-{settings.cluster}-token"[:253]
        self._secret_written = False
        self.calls: dict[str, int] = {}

    @classmethod
    def from_config(cls, config: ClusterConfig, region: str, *, cluster_token: str = "",
                    api_client: Any = None) -> KubernetesProvider:
        found = config.regions.get(region)
        if found is None or found.kubernetes is None:
            raise ConfigError(f"regions.{region}: no such region with kubernetes scale groups")
        kueue = any(g.kubernetes and g.kubernetes.local_queue
                    for g in found.scale_groups.values())
        return cls(KubernetesSettings(
            cluster=config.name, region=region, zones=found.zones,
            controller_address=config.controller.address, site=found.kubernetes,
            cluster_token=cluster_token, uses_kueue=kueue), api_client=api_client)

    # ---- the Provider contract --------------------------------------------------------

    def create_slice(self, group: ScaleGroupConfig, zone: str, slice_id: str) -> SliceInfo:
        check_create_request(group, zone, slice_id)
        if zone not in self._s.zones:
            raise InvalidRequestError(f"zone: {zone} is not in region {self._s.region} "
                                      f"({', '.join(self._s.zones)})", "zone")
        spec = PodSlice(self._s.cluster, self._s.region, zone, slice_id, self._ns,
                        self._s.controller_address, self._secret)
        try:
            manifest = job_manifest(spec, group, self._s.site)
        except ValueError as exc:
            raise InvalidRequestError(f"group: {group.name}: {exc}", "group") from exc
        self._ensure_secret(zone)
        existing = self._get_job(slice_id)
        if existing is not None:
            raise ConflictError(f"slice {slice_id} already exists (Job in namespace "
                                f"{self._ns}, group {_label(existing, LABEL_GROUP)})")
        job = self._call(zone, f"create Job {slice_id}", self._batch.create_namespaced_job,
                         self._ns, manifest, _preload_content=False)
        return slice_from_objects(job, [], None, {})

    def delete_slice(self, slice_id: str) -> None:
        job = self._get_job(slice_id)
        if job is None:
            return
        try:
            self._count("delete_job")
            self._batch.delete_namespaced_job(slice_id, self._ns,
                                              propagation_policy="Background")
        except Exception as exc:
            if _status(exc) != 404:  # gone meanwhile: the outcome wanted
                raise _translate(exc, _label(job, "iris.dev/zone"),
                                 f"delete Job {slice_id}") from exc

    def list_slices(self, group: str | None = None) -> list[SliceInfo]:
        selector = f"{LABEL_CLUSTER}={self._s.cluster}"
        if group is not None:
            selector += f",{LABEL_GROUP}={group}"
        jobs = self._list("", "list Jobs", self._batch.list_namespaced_job, selector)
        pods = self._list("", "list pods", self._core.list_namespaced_pod, selector)
        workloads = self._workloads("") if self._s.uses_kueue else []
        cordoned = self._cordoned() if jobs else {}
        return [self._to_slice(j, pods, workloads, cordoned) for j in jobs]

    def slice_status(self, slice_id: str) -> SliceInfo:
        job = self._get_job(slice_id)
        if job is None:
            return SliceInfo.not_found(slice_id)
        selector = f"{LABEL_CLUSTER}={self._s.cluster},{LABEL_SLICE}={slice_id}"
        pods = self._list("", "list pods", self._core.list_namespaced_pod, selector)
        uid = (job.get("metadata") or {}).get("uid", "")
        workloads = self._workloads(f"{KUEUE_JOB_UID}={uid}") if self._s.uses_kueue else []
        return self._to_slice(job, pods, workloads, self._cordoned())

    def close(self) -> None:
        self._api.close()

    # ---- helpers ---------------------------------------------------------------------

    def _to_slice(self, job: dict, pods: list[dict], workloads: list[dict],
                  cordoned: dict[str, str]) -> SliceInfo:
        meta = job.get("metadata") or {}
        mine = [p for p in pods if _label(p, LABEL_SLICE) == meta.get("name")]
        uid = meta.get("uid")
        workload = next((w for w in workloads if _label(w, KUEUE_JOB_UID) == uid), None)
        return slice_from_objects(job, mine, workload, cordoned)

    def _get_job(self, slice_id: str) -> dict | None:
        try:
            self._count("get_job")
            job = _body(self._batch.read_namespaced_job(slice_id, self._ns,
                                                        _preload_content=False))
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise _translate(exc, "", f"get Job {slice_id}") from exc
        return job if _label(job, LABEL_CLUSTER) == self._s.cluster else None

    def _list(self, zone: str, what: str, fn, selector: str) -> list[dict]:
        return self._call(zone, what, fn, self._ns, label_selector=selector,
                          _preload_content=False).get("items") or []

    def _workloads(self, selector: str) -> list[dict]:
        group, version, plural = KUEUE
        try:
            self._count("list_workloads")
            out = self._custom.list_namespaced_custom_object(
                group, version, self._ns, plural, label_selector=selector)
        except Exception as exc:
            if _status(exc) == 404:  # Kueue not installed: no workloads to read
                return []
            raise _translate(exc, "", "list Kueue workloads") from exc
        return out.get("items") or []

    def _cordoned(self) -> dict[str, str]:
        """Nodes taking no new pods (cordoned): name -> why; {} if nodes may not be read."""
        try:
            self._count("list_nodes")
            nodes = _body(self._core.list_node(_preload_content=False)).get("items") or []
        except Exception as exc:
            if _status(exc) in (401, 403, 404):
                return {}
            raise _translate(exc, "", "list nodes") from exc
        return {n["metadata"]["name"]: "is cordoned (unschedulable)" for n in nodes
                if (n.get("spec") or {}).get("unschedulable")}

    def _ensure_secret(self, zone: str) -> None:
        if self._secret_written or not self._s.cluster_token:
            return
        body = token_secret(self._secret, self._ns, self._s.cluster, self._s.cluster_token)
        try:
            self._count("create_secret")
            self._core.create_namespaced_secret(self._ns, body)
        except Exception as exc:
            if _status(exc) != 409:
                raise _translate(exc, zone, "create the token Secret") from exc
            self._call(zone, "update the token Secret",
                       self._core.replace_namespaced_secret, self._secret, self._ns, body)
        self._secret_written = True

    def _call(self, zone: str, what: str, fn, *args, **kwargs) -> dict:
        self._count(fn.__name__)
        try:
            return _body(fn(*args, **kwargs))
        except Exception as exc:
            raise _translate(exc, zone, what) from exc

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1


def _body(response: Any) -> dict:
    """A raw response (`_preload_content=False`) as the JSON dict the server sent."""
    if isinstance(response, dict):
        return response
    data = getattr(response, "data", None)
    if data is None:
        return {}
    return json.loads(data)


def _label(obj: dict, key: str) -> str:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(key, "")


def _status(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


def _translate(exc: Exception, zone: str, what: str) -> IrisError:
    status = _status(exc)
    body = getattr(exc, "body", None) or ""
    try:
        said = json.loads(body).get("message", "") if body else ""
    except (ValueError, AttributeError):
        said = str(body)
    said = said or str(exc).splitlines()[0]
    where = f"zone {zone}: " if zone else ""
    message = f"{where}{what} failed: {status or type(exc).__name__}: {said}"
    if status == 409:
        return ConflictError(message)
    if status == 429 or (status == 403 and "exceeded quota" in said):
        return CapacityError(message)
    return ProviderError(message)


__all__ = ["ENV_API_SERVER", "KubernetesProvider", "KubernetesSettings", "make_api_client"]
