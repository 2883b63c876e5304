"""Cluster config: the example loads, and each kind of mistake names its key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from iris.base.errors import ConfigError
from iris.controller.config import default_local_config, load_config, parse_config

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "cluster.example.yaml"
GROUP = "regions.us-west4.scale_groups.v5e-16"
RESERVED = "regions.us-west4.scale_groups.v5e-16-reserved"


def _example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_load_config_example_file_gives_every_region_and_group():
    config = load_config(EXAMPLE)
    assert set(config.regions) == {"us-central2", "us-west4", "europe-west4"}
    v5e = config.scale_group("v5e-16")
    assert (v5e.hosts_per_slice, v5e.accelerators_per_host, v5e.zones) == (4, 4, ("us-west4-a",))
    assert (v5e.spot, v5e.preemptible, v5e.priority) == (True, True, 5)
    assert config.scale_group("v4-32").hosts_per_slice == 4
    assert config.scale_group("v5e-16-reserved").zones == ("us-west4-a", "us-west4-b")
    assert config.scale_group("v4-8").runtime_version == "tpu-ubuntu2204-base"
    assert config.gcp.project == "my-project"
    assert config.storage.log_bucket == "my-project-iris"


def test_load_config_yaml_text_same_as_file():
    assert load_config(EXAMPLE.read_text()) == load_config(str(EXAMPLE))


def _edit(path: str, value, delete: bool = False) -> dict:
    data = copy.deepcopy(_example())
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    if delete:
        del node[last]
    else:
        node[last] = value
    return data


@pytest.mark.parametrize(("path", "value", "expected"), [
    (f"{RESERVED}.max_slices", 1, f"{RESERVED}.max_slices: must be >= min_slices (1 < 2)"),
    (f"{GROUP}.min_slices", 40, f"{GROUP}.max_slices: must be >= min_slices (32 < 40)"),
    (f"{GROUP}.buffer_slices", 40, f"{GROUP}.buffer_slices: must be <= max_slices (40 > 32)"),
    (f"{GROUP}.min_slices", -1, f"{GROUP}.min_slices: must be >= 0"),
    (f"{GROUP}.max_slice", 3, f"{GROUP}.max_slice: unknown key (did you mean 'max_slices'?)"),
    (f"{GROUP}.hosts_per_slice", 2, f"{GROUP}.hosts_per_slice: v5litepod-16 has 4, not 2"),
    (f"{GROUP}.accelerator_variant", "v9-8", f"{GROUP}.accelerator_variant: tpu: unknown"),
    (f"{GROUP}.accelerator_type", "fpga", f"{GROUP}.accelerator_type: must be one of"),
    (f"{GROUP}.zones", ["us-east1-b"], f"{GROUP}.zones: 'us-east1-b' is not a zone of region"),
    (f"{GROUP}.max_slices", "lots", f"{GROUP}.max_slices: expected int, got str"),
    (f"{GROUP}.preemptible", "yes", f"{GROUP}.preemptible: expected bool"),
    (f"{GROUP}.priority", True, f"{GROUP}.priority: expected int, got True"),
    (f"{GROUP}.provider", "aws", f"{GROUP}.provider: must be one of gcp, slurm, kubernetes, local, simulated"),
    (f"{GROUP}.preemptible", False, f"{GROUP}.spot: spot capacity is preemptible"),
    ("regions.us-west4.zones", [], "regions.us-west4.zones: list at least one zone"),
    ("regions.us-west4.zones", ["Bad_Zone"], "regions.us-west4.zones[0]: 'Bad_Zone' is not"),
    ("regions.us-west4.scale_groups.v4-8", {"accelerator_type": "tpu",
                                            "accelerator_variant": "v4-8"},
     "regions.us-west4.scale_groups.v4-8: scale group names must be unique in the cluster"),
    ("regions.us-west4.scale_groups.GPU", {}, "regions.us-west4.scale_groups.GPU: 'GPU' is not"),
    ("regions.us-west4.scale_groups.h100", {"accelerator_type": "gpu", "accelerator_variant": "X1",
                                            "hosts_per_slice": 1},
     "regions.us-west4.scale_groups.h100.accelerator_variant: unknown gpu 'X1'"),
    ("regions.us-west4.scale_groups.h100", {"accelerator_type": "gpu", "accelerator_variant": "H100"},
     "regions.us-west4.scale_groups.h100.hosts_per_slice: a gpu group needs an int >= 1"),
    ("regions", {}, "regions: list at least one region"),
    ("controller.address", "10.0.0.1:7100", "controller.address: '10.0.0.1:7100' is not tcp://"),
    ("controller.adress", "tcp://a:1", "controller.adress: unknown key (did you mean 'address'?)"),
    ("storage.log_dir", "/var/log/iris", "storage.log_bucket: set exactly one of"),
    ("storage.snapshot_bucket", "gs://x", "storage.snapshot_bucket: 'gs://x' is not a GCS bucket"),
    ("storage.snapshot_interval_s", 0, "storage.snapshot_interval_s: must be > 0"),
    ("gcp.project", None, "gcp.project: required"),
    ("name", "Iris Prod", "name: 'Iris Prod' is not a valid name"),
    ("regoins", {}, "regoins: unknown key (did you mean 'regions'?)"),
])
def test_parse_config_mistake_names_key_and_problem(path, value, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(_edit(path, value))
    assert str(err.value).startswith(expected), str(err.value)


@pytest.mark.parametrize(("path", "expected"), [
    ("controller", "controller: required"),
    ("gcp", "gcp: required because scale group v4-8 uses provider gcp"),
    (f"{GROUP}.accelerator_type", f"{GROUP}.accelerator_type: required"),
])
def test_parse_config_missing_section_names_key(path, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_config(_edit(path, None, delete=True))


def test_parse_config_non_mapping_region_names_key():
    with pytest.raises(ConfigError, match="regions.us-west4: expected a mapping, got list"):
        parse_config(_edit("regions.us-west4", ["a"]))


def test_load_config_file_error_names_file_and_key(tmp_path: Path):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(_edit(f"{RESERVED}.max_slices", 1)))
    with pytest.raises(ConfigError, match=f"^{path}: {RESERVED}.max_slices: must be >= min"):
        load_config(path)


def test_load_config_missing_file_and_bad_yaml_are_config_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match="nope.yaml: cannot read config file"):
        load_config(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config("name: [unclosed\nregions: {}\n")
    with pytest.raises(ConfigError, match="<top level>: expected a mapping, got list"):
        load_config("- a\n- b\n")


def test_default_local_config_has_one_local_cpu_group_of_n_workers():
    config = default_local_config(workers=3, log_dir="/tmp/iris-logs")
    (group,) = config.scale_groups()
    assert (group.provider, group.accelerator_type) == ("local", "cpu")
    assert (group.min_slices, group.max_slices, group.hosts_per_slice) == (3, 3, 1)
    assert config.storage.log_dir == "/tmp/iris-logs"
    with pytest.raises(ConfigError, match="workers"):
        default_local_config(workers=0)


def test_config_autoscaler_timings_are_read_and_checked():
    from iris.controller.config import parse_config

    base = {"name": "c", "controller": {"address": "tcp://10.0.0.1:7100"},
            "storage": {"log_dir": "/tmp/logs"},
            "regions": {"r1": {"zones": ["r1-a"], "scale_groups": {"cpu": {
                "accelerator_type": "cpu", "hosts_per_slice": 1, "zones": ["r1-a"],
                "provider": "local"}}}}}
    config = parse_config({**base, "autoscaler": {"scale_up_delay_s": 1, "scale_down_delay_s": 30}})
    assert config.autoscaler == {"scale_up_delay_s": 1.0, "scale_down_delay_s": 30.0}
    with pytest.raises(ConfigError, match=r"autoscaler.scale_up_delay: unknown key"):
        parse_config({**base, "autoscaler": {"scale_up_delay": 1}})
    with pytest.raises(ConfigError, match=r"autoscaler.boot_timeout_s: must be >= 0"):
        parse_config({**base, "autoscaler": {"boot_timeout_s": -1}})
