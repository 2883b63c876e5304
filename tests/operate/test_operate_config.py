"""The config as users write it: the Iris README's single-region form and controller.vm."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.base.errors import ConfigError
from iris.controller.config import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "cluster.example.yaml"

README_CONFIG = """
provider:
  type: gcp
  project_id: my-project
  region: us-central1
  zone: us-central1-a

controller:
  vm:
    enabled: true
    machine_type: n2-standard-4
    port: 10000

scale_groups:
  tpu_v5e_4:
    accelerator_type: v5litepod-4
    runtime_version: v2-alpha-tpuv5-lite
    min_slices: 0
    max_slices: 10
    preemptible: true
    zones: [us-central1-a, us-central1-b]
"""


def test_readme_config_loads_into_one_region_with_its_controller_vm():
    config = load_config(README_CONFIG)
    [group] = config.scale_groups()
    assert (group.name, group.region, group.accelerator_type, group.accelerator_variant) == \
        ("tpu-v5e-4", "us-central1", "tpu", "v5litepod-4")
    assert (group.min_slices, group.max_slices, group.preemptible, group.zones) == \
        (0, 10, True, ("us-central1-a", "us-central1-b"))
    assert group.runtime_version == "v2-alpha-tpuv5-lite" and group.provider == "gcp"
    assert config.regions["us-central1"].zones == ("us-central1-a", "us-central1-b")
    assert config.gcp.project == "my-project"
    vm = config.controller.vm
    assert (vm.name, vm.zone, vm.machine_type) == ("iris-controller", "us-central1-a",
                                                   "n2-standard-4")
    assert config.controller.address == \
        "tcp://iris-controller.us-central1-a.c.my-project.internal:10000"


@pytest.mark.parametrize("typo, where, hint", [
    ("max_slices: 10", "scale_groups.tpu_v5e_4.max_slice", "max_slices"),
    ("machine_type:", "controller.vm.machine_typ", "machine_type"),
    ("project_id:", "provider.projectid", "project_id"),
    ("runtime_version:", "scale_groups.tpu_v5e_4.runtim_version", "runtime_version"),
])
def test_readme_config_typo_is_named_with_the_close_key(typo, where, hint):
    broken = {"max_slices: 10": "max_slice: 10", "machine_type:": "machine_typ:",
              "project_id:": "projectid:", "runtime_version:": "runtim_version:"}[typo]
    with pytest.raises(ConfigError) as err:
        load_config(README_CONFIG.replace(typo, broken))
    assert str(err.value).startswith(f"{where}: unknown key (did you mean '{hint}'?)")


@pytest.mark.parametrize("change, message", [
    (("accelerator_type: v5litepod-4", "accelerator_type: v5e-4"), "unknown accelerator type .v5e-4."),
    (("type: gcp", "type: aws"), "provider.type: must be one of"),
    (("port: 10000", "port: 10000\n    disk_size_gb: 2"), "disk_size_gb: must be >= 10"),
    (("  zone: us-central1-a\n", ""), "provider.zone: required"),
])
def test_readme_config_bad_values_are_refused(change, message):
    with pytest.raises(ConfigError, match=message):
        load_config(README_CONFIG.replace(*change))


def test_controller_vm_in_the_multi_region_form():
    text = EXAMPLE.read_text()
    vm = load_config(text).controller.vm
    assert (vm.name, vm.zone, vm.machine_type, vm.dashboard_port) == \
        ("iris-controller", "us-central2-b", "n2-standard-4", 8265)
    with_port = text.replace("    zone: us-central2-b\n", "    zone: us-central2-b\n    port: 7101\n", 1)
    with pytest.raises(ConfigError, match="controller.vm.port: 7101 differs"):
        load_config(with_port)
    with pytest.raises(ConfigError, match="controller.vm.zone: required"):
        load_config(text.replace("    zone: us-central2-b\n", "", 1))
