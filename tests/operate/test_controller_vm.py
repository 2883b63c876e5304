"""ControllerVm through the real google-cloud-compute client against the fake Compute server."""

from __future__ import annotations

import pytest

from iris.base.errors import CapacityError, ConflictError, ProviderError
from iris.controller.config import load_config
from iris.controller.providers.gcp_compute import (
    CONFIG_KEY,
    ControllerVm,
    make_compute_clients,
)
from tests.operate.gcp_world import script_values
from tests.providers.fake_compute_server import FakeComputeServer

CONFIG = """
name: vmtest
controller:
  address: tcp://vmtest-controller.us-central2-b.c.test-proj.internal:7100
  bind: tcp://0.0.0.0:7100
  vm: {zone: us-central2-b, machine_type: n2-standard-8}
storage: {log_bucket: vmtest-logs}
gcp: {project: test-proj, iris_package: "iris==0.1.0", service_account: ctl@test-proj.iam}
regions:
  us-central2:
    zones: [us-central2-b]
"""


@pytest.fixture
def server():
    resets: list[str] = []
    with FakeComputeServer(on_reset=lambda inst: resets.append(inst["name"])) as fake:
        fake.resets = resets
        yield fake


def _vm(server: FakeComputeServer, text: str = CONFIG) -> ControllerVm:
    return ControllerVm(load_config(text), text, clients=make_compute_clients(server.url))


def test_create_makes_the_vm_once_with_its_startup_and_config(server):
    vm = _vm(server)
    try:
        info, made = vm.create()
        assert made and info.status == "RUNNING" and info.machine_type == "n2-standard-8"
        [instance] = server.instances()
        assert instance["labels"] == {"iris-cluster": "vmtest", "iris-role": "controller"}
        items = {i["key"]: i["value"] for i in instance["metadata"]["items"]}
        assert items[CONFIG_KEY] == CONFIG
        script = items["startup-script"]
        assert "{{" not in script
        assert script_values(script) == {
            "IRIS_PACKAGE": "iris==0.1.0", "IRIS_BIND": "tcp://0.0.0.0:7100",
            "IRIS_STATE_DIR": "/var/lib/iris", "IRIS_DASHBOARD_PORT": "8265",
            "IRIS_IMAGE": "", "IRIS_CONFIG_KEY": CONFIG_KEY, "IRIS_HOME": "/opt/iris"}
        assert instance["serviceAccounts"][0]["email"] == "ctl@test-proj.iam"
        again, made_again = vm.create()
        assert not made_again and again == info
        assert sum(1 for m, p in server.requests if m == "POST" and p.endswith("/instances")) == 1
    finally:
        vm.close()


def test_an_instance_of_that_name_from_elsewhere_is_refused_not_adopted(server):
    other = _vm(server, CONFIG.replace("name: vmtest", "name: other").replace(
        "  vm: {", "  vm: {name: vmtest-controller, "))
    vm = _vm(server)
    try:
        other.create()
        with pytest.raises(ConflictError, match="not cluster vmtest's controller"):
            vm.create()
        assert [i["labels"]["iris-cluster"] for i in server.instances()] == ["other"]
    finally:
        vm.close()
        other.close()


def test_reset_serial_output_and_delete(server):
    vm = _vm(server)
    try:
        assert vm.delete() is False  # nothing there yet: not an error
        vm.create()
        vm.reset()
        assert server.resets == ["vmtest-controller"]
        server.append_serial("vmtest-controller", "iris startup: controller started\n")
        assert vm.serial_output().endswith("controller started\n")
        assert vm.delete() is True
        assert server.instances() == [] and vm.find() is None
        with pytest.raises(ProviderError, match="reset vmtest-controller failed: NotFound"):
            vm.reset()
    finally:
        vm.close()


def test_a_stocked_out_zone_is_a_capacity_error_naming_it(server):
    server.stock_out("us-central2-b")
    vm = _vm(server)
    try:
        with pytest.raises(CapacityError, match="zone us-central2-b: insert .*"
                           "ZONE_RESOURCE_POOL_EXHAUSTED"):
            vm.create()
        assert server.instances() == []
    finally:
        vm.close()
