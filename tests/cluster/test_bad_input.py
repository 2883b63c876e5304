"""Bad input changes nothing: a real controller, fed wrong calls by clients and by peers that
hold the cluster token, refuses each with an error naming the problem, keeps its state as it
was, and keeps running jobs. Roles: worker and region methods refuse plain clients."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import iris
from iris.actors import tokens
from iris.actors.keys import CONTROLLER_KEY, region_key, worker_key
from iris.base.errors import InvalidRequestError, IrisError, PermissionDeniedError
from tests import joining
from tests.cluster.controller_state import controller_state
from tests.conftest import as_current

pytestmark = pytest.mark.slow


def _double(x: int) -> int:
    return 2 * x


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with iris.local_cluster(workers=1, state_dir=tmp_path_factory.mktemp("bad-input"),
                            stop_grace_s=2.0) as ctx:
        yield ctx


@pytest.fixture(scope="module")
def client(cluster):
    """A node of its own: calls from the cluster's node would be in process ("internal")."""
    with iris.connect(cluster.address) as ctx:
        yield ctx.node


@pytest.fixture
def current(cluster):
    with as_current(cluster):
        yield cluster


_CLIENT = {}


@pytest.fixture(autouse=True)
def _client_node(client):
    _CLIENT["node"] = client


def _token(cluster) -> bytes:
    return tokens.read(Path(_state_dir(cluster)) / tokens.CLUSTER_TOKEN_FILE)


def _state_dir(cluster) -> str:
    return _CLIENT["node"].call(cluster.address, CONTROLLER_KEY, "state_dir").result(30)


def _call(cluster, method: str, *args, auth: bytes | None = None):
    return _CLIENT["node"].call(cluster.address, CONTROLLER_KEY, method, args, timeout_s=30,
                                auth=auth).result(60)


def state_of(cluster) -> dict:
    return controller_state(_CLIENT["node"], cluster.address,
                            Path(_state_dir(cluster)) / "jobs.sqlite3")


def test_a_refused_job_does_not_block_later_submits(current):
    with pytest.raises(InvalidRequestError, match="unknown operator 'bogus'") as info:
        iris.submit(_double, 1, constraints={"zone": {"bogus": 1}})
    assert info.value.field == "constraints.zone"
    assert iris.submit(_double, 21).result() == 42  # and the pass goes on for everyone


def test_a_report_with_a_wrong_type_fails_alone_and_the_controller_keeps_running(current):
    worker = "w-bad-report"
    token = joining.credential(_CLIENT["node"], current.address, worker)  # speaks as itself
    before = state_of(current)
    bad = [{"attempt_id": "att-x", "status": "exited", "exit_code": 0, "result": {"a": 1}}]
    with pytest.raises(InvalidRequestError, match=r"updates\[0\]\.result"):
        _call(current, "report", worker, bad, None, [], auth=token)
    assert state_of(current) == before
    assert iris.submit(_double, 5).result() == 10  # not halted


def test_a_bad_registration_registers_nothing(current):
    token = joining.credential(_CLIENT["node"], current.address, "w-bogus")
    before = state_of(current)
    with pytest.raises(PermissionDeniedError, match="may speak only as itself"):
        _call(current, "register_worker", 12345, "tcp://127.0.0.1:9", {}, [], auth=token)
    with pytest.raises(InvalidRequestError, match=r"running\[0\]: expected a string"):
        _call(current, "register_worker", "w-bogus", "tcp://127.0.0.1:9", {}, [1, 2],
              auth=token)
    assert state_of(current) == before
    assert iris.submit(_double, 3).result() == 6  # submits and listings still work


def test_made_up_regions_are_bounded(tmp_path):
    # A cluster of its own: the Region actors it makes end with it (the leak check).
    with iris.local_cluster(workers=0, state_dir=tmp_path) as own, \
            iris.connect(own.address) as client:
        def register(worker_id: str, region: str):
            token = joining.credential(client.node, own.address, worker_id)
            return client.node.call(own.address, CONTROLLER_KEY, "register_worker", (
                worker_id, "tcp://127.0.0.1:9", {"region": region}, []), auth=token).result(60)

        threads = threading.active_count()
        refused = []
        for i in range(70):
            try:
                register(f"w-fake-{i}", f"made-up-{i}")
            except InvalidRequestError as exc:
                refused.append(str(exc))
        assert len(refused) == 70 - 64 and all("max_regions" in r for r in refused)
        assert threading.active_count() - threads <= 64
        with pytest.raises(InvalidRequestError, match="not a region name"):
            register("w-fake-x", "../../etc")


@pytest.mark.parametrize("method, args", [
    ("report", ("w-any", [])),
    ("register_worker", ("w-intruder", "tcp://127.0.0.1:9", {}, [])),
    ("drain_hosts", ({"h": "s"},)),
    ("undrain_hosts", (["h"],)),
    ("hosts_gone", ({"h": "gone"},)),
])
def test_control_plane_methods_refuse_clients(current, method, args):
    before = state_of(current)
    with pytest.raises(PermissionDeniedError, match="not permitted"):
        _call(current, method, *args)  # no token: a plain client
    assert state_of(current) == before


def test_a_client_cannot_drain_every_host(current):
    workers = _call(current, "list_workers")
    with pytest.raises(PermissionDeniedError):
        _call(current, "drain_hosts", {w["worker_id"]: "s" for w in workers})
    assert iris.submit(_double, 7).result(timeout=60) == 14  # nothing left pending


def test_worker_and_region_methods_refuse_clients(current):
    worker = _call(current, "list_workers")[0]
    node = _CLIENT["node"]
    with pytest.raises(PermissionDeniedError):
        node.call(worker["address"], worker_key(worker["worker_id"]), "stop_attempt",
                  ({"attempt_id": "att-x", "grace_s": 1.0, "reason": "r"},)).result(30)
    with pytest.raises(PermissionDeniedError):
        node.call(current.address, region_key("local"), "sync", ([], [])).result(30)


def test_a_member_with_a_wrong_token_is_a_client(current):
    with pytest.raises(PermissionDeniedError):
        _call(current, "report", "w-any", [], auth=b"\x00" * 32)
    with pytest.raises(IrisError):
        _call(current, "report", "w-any", [], auth=b"")  # empty: sent as no token


def test_a_workers_nonsense_figures_count_as_zero_and_the_snapshot_stays_json(tmp_path):
    """NaN, infinity, negatives, strings: a worker's own figures are observation; none may
    put a NaN (not JSON: the dashboard's parse fails) or a negative count in the snapshot."""
    import json

    with iris.local_cluster(workers=0, state_dir=tmp_path) as own, \
            iris.connect(own.address) as client:
        def call(method, *args, auth=None):
            return client.node.call(own.address, CONTROLLER_KEY, method, args,
                                    auth=auth).result(60)

        figures = [(float("nan"), -3), (float("inf"), float("-inf")), (-1.0, "x"), ("9" * 400, [1])]
        for i, (lag, dropped) in enumerate(figures):
            worker = f"w-figures-{i}"
            token = joining.credential(client.node, own.address, worker)
            call("register_worker", worker, "tcp://127.0.0.1:9", {}, [], auth=token)
            call("report", worker, [], {"log_shipping": {"max_flush_lag_s": lag,
                                                         "dropped_lines": dropped}}, [],
                 auth=token)
        shipping = call("snapshot")["log_shipping"]
        assert shipping == {"max_flush_lag_s": 0.0, "dropped_lines": 0}
        json.dumps(call("snapshot"), allow_nan=False)  # what the dashboard serves
