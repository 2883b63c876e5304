"""ControllerVm: the controller's own Compute Engine VM, through the google-cloud-compute client.

Not the worker slices (gcp_tpu.py) nor the decision to make the VM (the `iris cluster` CLI).
It finds, creates, resets and deletes one instance named by `controller.vm`, labelled with
the cluster, whose startup script (deploy/controller-startup.sh) installs Iris and runs
`iris controller serve --config` under systemd; the config travels as instance metadata
(`iris-cluster-config`), so the VM needs nothing copied onto it. Blocking calls.

Operations are followed with the public `ZoneOperationsClient.wait` (the client's own
`insert().result()` polls through an operations client built without our client options,
so it would ignore an emulator's endpoint: shared/recipes.md §2). Errors become Iris errors
raised `from` the Google ones: 409 ConflictError, quota and stock-outs CapacityError naming
the zone, the rest ProviderError.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import requests
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials

from iris.base.errors import CapacityError, ConfigError, ConflictError, IrisError, ProviderError
from iris.controller.config import ClusterConfig
from iris.controller.config_vm import ControllerVmConfig

if TYPE_CHECKING:
    from google.cloud import compute_v1

STARTUP_TEMPLATE = Path(__file__).resolve().parents[3] / "deploy" / "controller-startup.sh"
# Anonymous credentials against this endpoint instead of Google's (an emulator or a fake).
ENV_ENDPOINT = "IRIS_GCP_COMPUTE_ENDPOINT"
CONFIG_KEY = "iris-cluster-config"  # instance metadata holding the cluster config's YAML
LABEL_CLUSTER, LABEL_ROLE = "iris-cluster", "iris-role"
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")
_CAPACITY_WORDS = re.compile(r"quota|capacity|stockout|resource_exhausted|ZONE_RESOURCE", re.I)
# A VM insert usually finishes in 20-60 s; 10 min before giving up. Deletes take 1-2 min.
OPERATION_TIMEOUT_S = 600.0


def _compute_v1():
    """google.cloud.compute_v1, imported on first use: the import takes ~3.5 CPU-s, which a
    process that only reads CONFIG_KEY (the tests' collection, in every xdist worker) or never
    reaches Compute Engine should not pay."""
    from google.cloud import compute_v1

    return compute_v1


@dataclass(frozen=True)
class VmInfo:
    """One instance as Compute Engine reports it."""

    name: str
    zone: str
    status: str  # PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED...
    internal_ip: str
    machine_type: str
    labels: dict[str, str]


def make_compute_clients(endpoint: str | None = None) -> tuple[compute_v1.InstancesClient,
                                                               compute_v1.ZoneOperationsClient]:
    """Instances and zone-operations clients: application default credentials, or anonymous
    against `endpoint` (default $IRIS_GCP_COMPUTE_ENDPOINT)."""
    compute_v1 = _compute_v1()
    endpoint = endpoint or os.environ.get(ENV_ENDPOINT)
    if not endpoint:
        return compute_v1.InstancesClient(), compute_v1.ZoneOperationsClient()
    opts = ClientOptions(api_endpoint=endpoint)
    creds = AnonymousCredentials()
    return (compute_v1.InstancesClient(credentials=creds, client_options=opts),
            compute_v1.ZoneOperationsClient(credentials=creds, client_options=opts))


def render_controller_startup(template: str, values: dict[str, str]) -> str:
    """Fill `{{IRIS_*}}` with shell-quoted values; a placeholder without a value fails."""
    missing = set(_PLACEHOLDER.findall(template)) - set(values)
    if missing:
        raise ConfigError(f"controller startup script: no value for {sorted(missing)}")
    return _PLACEHOLDER.sub(lambda m: shlex.quote(values[m.group(1)]), template)


class ControllerVm:
    """The controller VM of one cluster config; see the module docstring."""

    def __init__(self, config: ClusterConfig, config_text: str, *,
                 clients: tuple | None = None, timeout_s: float = OPERATION_TIMEOUT_S):
        vm = config.controller.vm
        if vm is None or not vm.enabled or config.gcp is None:
            raise ConfigError("controller.vm: the config names no controller VM (add a "
                              "controller.vm section with its zone, and a gcp section)")
        self.vm: ControllerVmConfig = vm
        self._config, self._text = config, config_text
        self._project = config.gcp.project
        self._instances, self._ops = clients or make_compute_clients()
        self._timeout_s = timeout_s

    def find(self) -> VmInfo | None:
        try:
            found = self._instances.get(project=self._project, zone=self.vm.zone,
                                        instance=self.vm.name)
        except gexc.NotFound:
            return None
        except (gexc.GoogleAPIError, requests.RequestException) as exc:
            raise self._error(exc, "get") from exc
        return _info(found)

    def create(self) -> tuple[VmInfo, bool]:
        """The VM, made if absent; (info, made now). An instance of that name that is not
        this cluster's is refused, never adopted."""
        found = self.find()
        if found is None:
            try:
                op = self._instances.insert_unary(project=self._project, zone=self.vm.zone,
                                                  instance_resource=self._spec())
                self._wait(op, "insert")
            except ConflictError:
                pass  # made meanwhile (a second `start`): find it below
            except (gexc.GoogleAPIError, requests.RequestException) as exc:
                raise self._error(exc, "insert") from exc
            found, made = self.find(), True
            if found is None:
                raise ProviderError(f"zone {self.vm.zone}: {self.vm.name} was created but "
                                    "is not found")
        else:
            made = False
        if found.labels.get(LABEL_CLUSTER) != self._config.name:
            raise ConflictError(f"instance {self.vm.name} in {self.vm.zone} exists but is not "
                                f"cluster {self._config.name}'s controller (labels "
                                f"{found.labels}); name another in controller.vm.name")
        return found, made

    def delete(self) -> bool:
        """Delete the VM; False if there was none."""
        if self.find() is None:
            return False
        try:
            op = self._instances.delete_unary(project=self._project, zone=self.vm.zone,
                                              instance=self.vm.name)
            self._wait(op, "delete")
        except gexc.NotFound:
            return False
        except (gexc.GoogleAPIError, requests.RequestException) as exc:
            raise self._error(exc, "delete") from exc
        return True

    def reset(self) -> None:
        """Hard reset: the disk (and the controller's state on it) stays, the process restarts
        from it, as after a crash (nothing acknowledged is lost: jobs/store.py)."""
        try:
            op = self._instances.reset_unary(project=self._project, zone=self.vm.zone,
                                              instance=self.vm.name)
            self._wait(op, "reset")
        except (gexc.GoogleAPIError, requests.RequestException) as exc:
            raise self._error(exc, "reset") from exc

    def serial_output(self, start: int = 0) -> str:
        """What the VM wrote on its serial console (boot and startup script)."""
        compute_v1 = _compute_v1()
        try:
            out = self._instances.get_serial_port_output(
                request=compute_v1.GetSerialPortOutputInstanceRequest(
                    project=self._project, zone=self.vm.zone, instance=self.vm.name,
                    start=start))
        except (gexc.GoogleAPIError, requests.RequestException) as exc:
            raise self._error(exc, "serial port output") from exc
        return out.contents

    def close(self) -> None:
        for client in (self._instances, self._ops):
            client.transport.close()

    def _spec(self) -> compute_v1.Instance:
        compute_v1 = _compute_v1()
        vm, gcp = self.vm, self._config.gcp
        bind = self._config.controller.bind or self._config.controller.address
        script = render_controller_startup(_read(STARTUP_TEMPLATE), {
            "IRIS_PACKAGE": gcp.iris_package, "IRIS_BIND": bind,
            "IRIS_STATE_DIR": self._config.controller.state_dir or "/var/lib/iris",
            "IRIS_DASHBOARD_PORT": str(vm.dashboard_port), "IRIS_IMAGE": vm.image or "",
            "IRIS_CONFIG_KEY": CONFIG_KEY})
        nic = compute_v1.NetworkInterface(network=f"global/networks/{gcp.network}")
        if gcp.subnetwork:
            nic.subnetwork = gcp.subnetwork
        instance = compute_v1.Instance(
            name=vm.name, machine_type=f"zones/{vm.zone}/machineTypes/{vm.machine_type}",
            labels={LABEL_CLUSTER: self._config.name, LABEL_ROLE: "controller"},
            tags=compute_v1.Tags(items=["iris-controller"]),
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True,
                                           initialize_params=compute_v1.AttachedDiskInitializeParams(
                                               source_image=vm.boot_image,
                                               disk_size_gb=vm.disk_size_gb))],
            network_interfaces=[nic],
            metadata=compute_v1.Metadata(items=[
                compute_v1.Items(key="startup-script", value=script),
                compute_v1.Items(key=CONFIG_KEY, value=self._text)]))
        if gcp.service_account:
            instance.service_accounts = [compute_v1.ServiceAccount(
                email=gcp.service_account,
                scopes=["https://www.googleapis.com/auth/cloud-platform"])]
        return instance

    def _wait(self, op: compute_v1.Operation, what: str) -> None:
        """Follow a zone operation to DONE (wait returns after <= 2 min each time)."""
        compute_v1 = _compute_v1()
        deadline_polls = max(1, int(self._timeout_s / 120) + 1)
        for _ in range(deadline_polls + 1):
            if op.status == compute_v1.Operation.Status.DONE:
                break
            op = self._ops.wait(project=self._project, zone=self.vm.zone, operation=op.name)
        else:
            raise ProviderError(f"zone {self.vm.zone}: {what} {self.vm.name} not done "
                                f"within {self._timeout_s:.0f} s")
        if op.error and op.error.errors:
            words = "; ".join(f"{e.code}: {e.message}" for e in op.error.errors)
            message = f"zone {self.vm.zone}: {what} {self.vm.name} failed: {words}"
            if op.http_error_status_code == 409:
                raise ConflictError(message)
            raise (CapacityError if _CAPACITY_WORDS.search(words) else ProviderError)(message)

    def _error(self, exc: Exception, what: str) -> IrisError:
        message = f"zone {self.vm.zone}: {what} {self.vm.name} failed: {type(exc).__name__}: {exc}"
        if isinstance(exc, gexc.Conflict | gexc.AlreadyExists):
            return ConflictError(message)
        if isinstance(exc, gexc.TooManyRequests) or _CAPACITY_WORDS.search(str(exc)):
            return CapacityError(message)
        return ProviderError(message)


def _info(instance: compute_v1.Instance) -> VmInfo:
    nics = instance.network_interfaces
    return VmInfo(name=instance.name, zone=instance.zone.rsplit("/", 1)[-1],
                  status=instance.status, internal_ip=nics[0].network_i_p if nics else "",
                  machine_type=instance.machine_type.rsplit("/", 1)[-1],
                  labels=dict(instance.labels))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"controller startup script: cannot read {path}: {exc.strerror}") \
            from exc


__all__ = ["CONFIG_KEY", "ControllerVm", "VmInfo", "make_compute_clients",
           "render_controller_startup"]
