"""The `controller.vm` section: the controller's own Compute Engine VM, as configured.

Not the VM itself (providers/gcp_compute.py makes and deletes it) nor the rest of the
config (config.py, which calls `controller_vm` with the section already checked for
unknown keys). `iris cluster --config F start` makes this VM and runs `iris controller
serve --config` on it; without the section the operator runs the controller elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from iris.base.errors import ConfigError

_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9-]{1,62}$")


@dataclass(frozen=True)
class ControllerVmConfig:
    """Where and how the controller's VM is made."""

    name: str  # instance name; default "<cluster>-controller"
    zone: str  # e.g. us-central1-a
    # 4 vCPU / 16 GB: the controller is one process whose busiest thread (placement over
    # 7,500 pending tasks) takes < 80 ms a pass; more cores buy nothing, less memory risks
    # the SQLite page cache of a large job history.
    machine_type: str = "n2-standard-4"
    boot_image: str = "projects/debian-cloud/global/images/family/debian-12"
    disk_size_gb: int = 50  # holds the SQLite state, bundles and logs of a busy week
    dashboard_port: int = 8265  # what `iris controller serve` picks by default
    image: str | None = None  # a container image to run instead of pip-installing iris
    enabled: bool = True  # false: keep the section but run the controller elsewhere


def controller_vm(sec: Any, cluster: str, gcp: Any, address: str) -> ControllerVmConfig:
    """The section read through config._Section `sec` (unknown keys already refused; the
    gcp section it needs is checked with the others, in config.parse_config)."""
    enabled = sec.get("enabled", bool, True)
    zone = sec.name("zone", None)
    if zone is None and enabled:
        raise ConfigError("controller.vm.zone: required (the zone the controller VM runs in)")
    port = sec.get("port", int, None)
    given = address.rsplit(":", 1)[-1]
    if port is not None and str(port) != given:
        raise ConfigError(f"controller.vm.port: {port} differs from the port of "
                          f"controller.address ({given})")
    machine = sec.get("machine_type", str, ControllerVmConfig.machine_type)
    if not _MACHINE_TYPE.match(machine):
        raise ConfigError(f"controller.vm.machine_type: {machine!r} is not a machine type "
                          "(e.g. n2-standard-4)")
    disk = sec.count("disk_size_gb", ControllerVmConfig.disk_size_gb)
    if disk < 10:
        raise ConfigError(f"controller.vm.disk_size_gb: must be >= 10 (a Debian image needs "
                          f"it), got {disk}")
    dashboard = sec.count("dashboard_port", ControllerVmConfig.dashboard_port)
    if not 0 < dashboard < 65536:
        raise ConfigError(f"controller.vm.dashboard_port: must be 1-65535, got {dashboard}")
    return ControllerVmConfig(
        name=sec.name("name", f"{cluster}-controller"), zone=zone or "", machine_type=machine,
        boot_image=sec.get("boot_image", str, ControllerVmConfig.boot_image),
        disk_size_gb=disk, dashboard_port=dashboard, image=sec.get("image", str, None),
        enabled=enabled)


__all__ = ["ControllerVmConfig", "controller_vm"]
