"""GcpTpuProvider: TPU VM slices through the google-cloud-tpu tpu_v2 client (REST transport).

Not the autoscaler and not a worker: it creates a node whose startup script installs Iris
and starts `iris worker` pointed at the controller, deletes nodes, lists the nodes this
cluster owns (by label) and maps GCP node states and errors onto the Provider contract in
providers/base.py. Blocking: the region actor calls it from an executor thread.

Errors: ResourceExhausted / 429 / quota or stock-out wording (immediately, or as a failed
create operation) become CapacityError naming the zone; 409 becomes ConflictError (REST maps
errors by HTTP status, so a duplicate id arrives as Conflict, not AlreadyExists); the rest
become ProviderError. Each is raised `from` the Google exception.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import requests
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.api_core.future import polling
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2

from iris.base.errors import (
    CapacityError,
    ConfigError,
    ConflictError,
    InvalidRequestError,
    IrisError,
    ProviderError,
)
from iris.controller.config import ClusterConfig, ScaleGroupConfig
from iris.controller.providers.base import HostInfo, SliceInfo, SliceState, check_create_request

# The node metadata key worker-startup.sh reads the cluster token from.
TOKEN_METADATA_KEY = "iris-cluster-token"
DEFAULT_STARTUP_SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "worker-startup.sh"
LABEL_CLUSTER, LABEL_GROUP, LABEL_REGION = "iris-cluster", "iris-group", "iris-region"
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")
_TEMPLATE_KEYS = frozenset({"IRIS_CONTROLLER", "IRIS_REGION", "IRIS_ZONE", "IRIS_SLICE_ID",
                            "IRIS_SCALE_GROUP", "IRIS_CLUSTER", "IRIS_PACKAGE",
                            "IRIS_ACCELERATOR"})
# Words GCP uses for stock-outs and quota when the status code alone does not say so
# (a stock-out has come back as UNAVAILABLE with "no more capacity in the zone").
_CAPACITY_WORDS = re.compile(r"quota|capacity|stockout|stock-out|resource_exhausted", re.I)
_STATES = {
    "CREATING": SliceState.CREATING, "STARTING": SliceState.CREATING,
    "RESTARTING": SliceState.CREATING, "REIMAGING": SliceState.CREATING,
    "REPAIRING": SliceState.CREATING, "UNHIDING": SliceState.CREATING,
    "READY": SliceState.READY, "PREEMPTED": SliceState.PREEMPTED,
    "DELETING": SliceState.DELETING, "STOPPING": SliceState.DELETING,
    "HIDING": SliceState.DELETING,
}  # anything else (STOPPED, TERMINATED, HIDDEN, UNKNOWN...) is FAILED: delete and replace


@dataclass(frozen=True)
class GcpTpuSettings:
    """Where and how one region's slices are made."""

    project: str
    cluster: str  # label value tying nodes to this cluster (two clusters may share a project)
    region: str
    zones: tuple[str, ...]  # zones list_slices looks in: every zone of the region
    controller_address: str  # what the startup script passes to `iris worker --controller`
    iris_package: str = "iris"  # pip requirement the startup script installs
    # The cluster's member token (hex), handed to the slice's workers as node metadata
    # (`iris-cluster-token`): without it a worker on another host cannot register. Empty:
    # none is handed (the workers must be given one some other way).
    cluster_token: str = field(default="", repr=False)
    service_account: str | None = None
    network: str = "default"
    subnetwork: str | None = None
    # Pod slices (v4-32 and up) can take 10-20 min to reach READY; 30 min before giving up.
    create_timeout_s: float = 1800.0
    delete_timeout_s: float = 900.0  # deletes usually finish in 1-3 min
    # LRO polling: 5 s then x1.5 up to 30 s keeps a 2-minute create to ~10 GETs.
    poll_initial_s: float = 5.0
    poll_max_s: float = 30.0


# Anonymous credentials against this endpoint instead of Google's (an emulator or a fake).
ENV_ENDPOINT = "IRIS_GCP_TPU_ENDPOINT"


def make_tpu_client(endpoint: str | None = None) -> tpu_v2.TpuClient:
    """The REST client: application default credentials, or anonymous against `endpoint`
    (default $IRIS_GCP_TPU_ENDPOINT)."""
    endpoint = endpoint or os.environ.get(ENV_ENDPOINT)
    if not endpoint:
        return tpu_v2.TpuClient(transport="rest")
    return tpu_v2.TpuClient(credentials=AnonymousCredentials(), transport="rest",
                            client_options=ClientOptions(api_endpoint=endpoint))


def render_startup_script(template: str, values: dict[str, str]) -> str:
    """Fill `{{IRIS_*}}` placeholders with shell-quoted values; unknown or missing ones fail."""
    used = set(_PLACEHOLDER.findall(template))
    if used - _TEMPLATE_KEYS or _TEMPLATE_KEYS - set(values):
        raise ConfigError(f"startup script: unknown placeholders {sorted(used - _TEMPLATE_KEYS)}, "
                          f"values missing for {sorted(_TEMPLATE_KEYS - set(values))}")
    if "IRIS_CONTROLLER" not in used:
        raise ConfigError("startup script: template never uses {{IRIS_CONTROLLER}}")
    return _PLACEHOLDER.sub(lambda m: shlex.quote(values[m.group(1)]), template)


class GcpTpuProvider:
    """A Provider on Cloud TPU VMs; see the module docstring."""

    def __init__(self, settings: GcpTpuSettings, *, client: tpu_v2.TpuClient | None = None,
                 startup_script: str | None = None):
        self._s = settings
        self._client = client or make_tpu_client()
        self._template = startup_script if startup_script is not None else _read_template(None)
        render_startup_script(self._template, dict.fromkeys(_TEMPLATE_KEYS, "x"))
        self._zones: dict[str, str] = {}  # slice id -> zone, to skip a search on delete
        self._polling = polling.DEFAULT_POLLING.with_delay(
            initial=settings.poll_initial_s, maximum=settings.poll_max_s)

    @classmethod
    def from_config(cls, config: ClusterConfig, region: str, *,
                    client: tpu_v2.TpuClient | None = None, **overrides) -> GcpTpuProvider:
        """The provider for one region of a cluster config (`overrides` go to the settings)."""
        if config.gcp is None:
            raise ConfigError("gcp: required for GcpTpuProvider")
        if region not in config.regions:
            raise ConfigError(f"regions.{region}: no such region in the config")
        gcp = config.gcp
        settings = GcpTpuSettings(
            project=gcp.project, cluster=config.name, region=region,
            zones=config.regions[region].zones, controller_address=config.controller.address,
            iris_package=gcp.iris_package, service_account=gcp.service_account,
            network=gcp.network, subnetwork=gcp.subnetwork, **overrides)
        return cls(settings, client=client, startup_script=_read_template(gcp.startup_script))

    def create_slice(self, group: ScaleGroupConfig, zone: str, slice_id: str) -> SliceInfo:
        check_create_request(group, zone, slice_id)
        if group.accelerator_type != "tpu":
            raise InvalidRequestError(f"group: {group.name} is a {group.accelerator_type} group; "
                                      "GcpTpuProvider makes TPU slices only", "group")
        if zone not in self._s.zones:
            raise InvalidRequestError(f"zone: {zone} is not in region {self._s.region} "
                                      f"({', '.join(self._s.zones)})", "zone")
        node = self._node_spec(group, zone, slice_id)
        # Node ids are unique per zone on GCP but slice ids are unique per provider, so look
        # in every zone first. Knowing the id was free also makes it safe to delete what a
        # failed create leaves behind; a create racing us in the same zone still gets a 409.
        existing = self.slice_status(slice_id)
        if existing.state is not SliceState.NOT_FOUND:
            raise ConflictError(f"slice {slice_id} already exists in zone {existing.zone} "
                                f"(group {existing.group})")
        try:
            op = self._client.create_node(parent=self._parent(zone), node_id=slice_id, node=node)
            created = op.result(timeout=self._s.create_timeout_s, polling=self._polling)
        except (gexc.GoogleAPIError, requests.RequestException, TimeoutError) as exc:
            error = _translate(exc, zone, f"create {slice_id}")
            if not isinstance(error, ConflictError):
                self._forget_failed(zone, slice_id)
            raise error from exc
        self._zones[slice_id] = zone
        return _slice_info(created)

    def delete_slice(self, slice_id: str) -> None:
        info = self.slice_status(slice_id)
        if info.state is SliceState.NOT_FOUND:
            return
        try:
            op = self._client.delete_node(name=self._name(info.zone, slice_id))
            op.result(timeout=self._s.delete_timeout_s, polling=self._polling)
        except gexc.NotFound:
            pass  # deleted meanwhile by someone else: the outcome we wanted
        except (gexc.GoogleAPIError, requests.RequestException, TimeoutError) as exc:
            raise _translate(exc, info.zone, f"delete {slice_id}") from exc
        self._zones.pop(slice_id, None)

    def list_slices(self, group: str | None = None) -> list[SliceInfo]:
        found = []
        for zone in self._s.zones:
            request = tpu_v2.ListNodesRequest(parent=self._parent(zone))
            try:
                for node in self._client.list_nodes(request=request):
                    if node.labels.get(LABEL_CLUSTER) != self._s.cluster:
                        continue
                    if group is None or node.labels.get(LABEL_GROUP) == group:
                        found.append(_slice_info(node))
            except (gexc.GoogleAPIError, requests.RequestException) as exc:
                raise _translate(exc, zone, "list nodes") from exc
        return found

    def slice_status(self, slice_id: str) -> SliceInfo:
        known = self._zones.get(slice_id)
        zones = [known] if known else list(self._s.zones)
        for zone in zones:
            try:
                node = self._client.get_node(name=self._name(zone, slice_id))
            except gexc.NotFound:
                continue
            except (gexc.GoogleAPIError, requests.RequestException) as exc:
                raise _translate(exc, zone, f"get {slice_id}") from exc
            if node.labels.get(LABEL_CLUSTER) == self._s.cluster:
                self._zones[slice_id] = zone
                return _slice_info(node)
        self._zones.pop(slice_id, None)
        return SliceInfo.not_found(slice_id)

    def close(self) -> None:
        self._client.transport.close()

    def _node_spec(self, group: ScaleGroupConfig, zone: str, slice_id: str) -> tpu_v2.Node:
        script = render_startup_script(self._template, {
            "IRIS_CONTROLLER": self._s.controller_address, "IRIS_REGION": self._s.region,
            "IRIS_ZONE": zone, "IRIS_SLICE_ID": slice_id, "IRIS_SCALE_GROUP": group.name,
            "IRIS_CLUSTER": self._s.cluster, "IRIS_PACKAGE": self._s.iris_package,
            "IRIS_ACCELERATOR": group.accelerator_variant or "",
        })
        node = tpu_v2.Node(
            accelerator_type=group.accelerator_variant, runtime_version=group.runtime_version,
            scheduling_config=tpu_v2.SchedulingConfig(
                spot=group.spot, preemptible=group.preemptible and not group.spot),
            metadata={"startup-script": script,
                      **({TOKEN_METADATA_KEY: self._s.cluster_token}
                         if self._s.cluster_token else {})},
            labels={LABEL_CLUSTER: self._s.cluster, LABEL_GROUP: group.name,
                    LABEL_REGION: self._s.region},
            network_config=tpu_v2.NetworkConfig(network=self._s.network,
                                                subnetwork=self._s.subnetwork or "",
                                                enable_external_ips=True),
            tags=["iris-worker"],
        )
        if self._s.service_account:
            node.service_account = tpu_v2.ServiceAccount(
                email=self._s.service_account,
                scope=["https://www.googleapis.com/auth/cloud-platform"])
        return node

    def _forget_failed(self, zone: str, slice_id: str) -> None:
        """A failed or timed-out create can leave a node behind; remove it, best effort."""
        try:
            node = self._client.get_node(name=self._name(zone, slice_id))
            if node.labels.get(LABEL_CLUSTER) == self._s.cluster:
                self._client.delete_node(name=node.name)
        except (gexc.GoogleAPIError, requests.RequestException):
            pass  # nothing there, or the next list shows it as FAILED for the autoscaler

    def _parent(self, zone: str) -> str:
        return f"projects/{self._s.project}/locations/{zone}"

    def _name(self, zone: str, slice_id: str) -> str:
        return f"{self._parent(zone)}/nodes/{slice_id}"


def _read_template(path: str | None) -> str:
    source = Path(path) if path else DEFAULT_STARTUP_SCRIPT
    try:
        return source.read_text()
    except OSError as exc:
        raise ConfigError(f"gcp.startup_script: cannot read {source}: {exc.strerror}") from exc


def _translate(exc: Exception, zone: str, what: str) -> IrisError:
    message = f"zone {zone}: {what} failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, gexc.Conflict | gexc.AlreadyExists):
        return ConflictError(message)
    if isinstance(exc, gexc.TooManyRequests) or _CAPACITY_WORDS.search(str(exc)):
        return CapacityError(message)
    return ProviderError(message)


def _slice_info(node: tpu_v2.Node) -> SliceInfo:
    parts = node.name.split("/")  # projects/P/locations/Z/nodes/ID
    slice_id, zone = parts[-1], parts[3]
    state = _STATES.get(node.state.name, SliceState.FAILED)
    hosts = tuple(HostInfo(host_id=f"{slice_id}-w{i}", address=ep.ip_address)
                  for i, ep in enumerate(node.network_endpoints))
    detail = " ".join(filter(None, (node.state.name, node.health_description)))
    return SliceInfo(slice_id=slice_id, group=node.labels.get(LABEL_GROUP, ""), zone=zone,
                     state=state, hosts=hosts, detail=detail)


__all__ = ["GcpTpuProvider", "GcpTpuSettings", "make_tpu_client", "render_startup_script"]
