"""The single-region config of the Iris README, rewritten into the multi-region form.

Not a second parser: `normalize_seed` only moves keys (checking each, and naming a typo with
the close key) into the tree config.py reads, which then checks every value. The form:

    provider: {type: gcp, project_id: P, region: us-central1, zone: us-central1-a}
    controller: {vm: {machine_type: n2-standard-4, port: 10000}}   # address derived
    scale_groups:
      tpu_v5e_4: {accelerator_type: v5litepod-4, runtime_version: ..., min_slices: 0,
                  max_slices: 10, preemptible: true, zones: [us-central1-a]}

`accelerator_type` names the TPU type itself here (the multi-region form says `tpu` and puts
the type in `accelerator_variant`); group names may use '_' (GCP labels may not: it becomes
'-'). Optional: name (default "iris"), storage (default a log directory on each VM), gcp
(service_account, iris_package...), autoscaler.
"""

from __future__ import annotations

from typing import Any

from iris.base.errors import ConfigError
from iris.controller.config import _GROUP_KEYS, ACCELERATOR_TYPES, PROVIDER_KINDS, _Section

_TOP = ("provider", "controller", "scale_groups", "name", "storage", "gcp", "autoscaler")
_PROVIDER = ("type", "project_id", "region", "zone")
# The README's controller port; ours (7100) is used when controller.address is given.
_SEED_PORT = 10000
# Without storage.log_bucket, task logs stay on each VM (they do not survive preemption).
_DEFAULT_LOG_DIR = "/var/lib/iris/logs"


def is_seed_form(data: Any) -> bool:
    return isinstance(data, dict) and "regions" not in data and (
        "provider" in data or "scale_groups" in data)


def normalize_seed(data: dict) -> dict:
    """The multi-region tree for a README-form config (see the module docstring)."""
    top = _Section(data, "", _TOP)
    provider = _Section(top.get("provider", dict), "provider", _PROVIDER)
    kind = provider.get("type", str)
    if kind not in PROVIDER_KINDS:
        raise ConfigError(f"provider.type: must be one of {', '.join(PROVIDER_KINDS)}, "
                          f"got {kind!r}")
    region = provider.name("region")
    zone = provider.name("zone")
    name = top.get("name", str, "iris")
    groups, zones = _groups(top.get("scale_groups", dict, {}), kind, zone)
    tree: dict[str, Any] = {
        "name": name,
        "controller": _controller(top.get("controller", dict, {}), provider, name, zone),
        "storage": top.get("storage", dict, {"log_dir": _DEFAULT_LOG_DIR}),
        "regions": {region: {"zones": zones, "scale_groups": groups}},
    }
    if kind == "gcp":
        gcp = dict(top.get("gcp", dict, {}))
        if "project" in gcp:
            raise ConfigError("gcp.project: give the project once, as provider.project_id")
        tree["gcp"] = {"project": provider.get("project_id", str), **gcp}
    if "autoscaler" in data:
        tree["autoscaler"] = data["autoscaler"]
    return tree


def _controller(data: dict, provider: _Section, name: str, zone: str) -> dict:
    sec = _Section(data, "controller", ("address", "bind", "state_dir", "vm"))
    out = dict(sec.data)
    vm = dict(sec.get("vm", dict, {}))
    vm.setdefault("zone", zone)
    if "address" not in out:  # the VM's internal DNS name, which every VM of the project knows
        port = vm.get("port", _SEED_PORT)
        vm_name = vm.get("name", f"{name}-controller")
        project = provider.get("project_id", str, "project")
        out["address"] = f"tcp://{vm_name}.{vm['zone']}.c.{project}.internal:{port}"
        out.setdefault("bind", f"tcp://0.0.0.0:{port}")
    out["vm"] = vm
    return out


def _groups(data: dict, kind: str, zone: str) -> tuple[dict, list[str]]:
    """Scale groups in the multi-region form, and the region's zones (provider.zone first)."""
    sec = _Section(data, "scale_groups", tuple(data))
    zones, out = [zone], {}
    for group_name, group in sec.data.items():
        key = sec.key(group_name)
        group = dict(_Section(group, key, _GROUP_KEYS).data)  # typos named in this form's path
        accel = group.get("accelerator_type")
        if isinstance(accel, str) and accel not in ACCELERATOR_TYPES:
            if "accelerator_variant" in group:
                raise ConfigError(f"{key}.accelerator_type: give the TPU type once: "
                                  f"accelerator_type: {accel} alone")
            group["accelerator_type"], group["accelerator_variant"] = "tpu", accel
        group.setdefault("provider", kind)
        for z in group.get("zones") or ():
            if isinstance(z, str) and z not in zones:
                zones.append(z)
        label = str(group_name).replace("_", "-")
        if label in out:
            raise ConfigError(f"{key}: is {label!r} as a GCP label, like another group")
        out[label] = group
    return out, zones


__all__ = ["is_seed_form", "normalize_seed"]
