"""Roles as a matrix (docs/protocol.md, Roles): every method of every control-plane actor,
called over real sockets by every kind of caller, is refused or let through as written
down, and a refusal changes nothing. Then the attacks of issue 26, with a worker's own
credential: forged commands to another worker and forged Region pushes are refused and
change nothing; a revoked worker is refused at its very next call, the others untouched.

A call that is let through carries arguments that cannot bind (nine of them), so it stops
at `bad_arguments` before anything runs: "allowed" means "passed the role check".
"""

from __future__ import annotations

import time

import pytest

import iris
from iris.actors import tokens
from iris.actors.hosting import spec_of
from iris.actors.keys import (
    CONTROLLER_KEY,
    INSPECT_KEY,
    REGISTRY_KEY,
    region_key,
    worker_inspect_key,
    worker_key,
)
from iris.actors.registry import Registry
from iris.base.errors import BadArgumentsError, InvalidRequestError, PermissionDeniedError
from iris.controller.actor import Controller
from iris.controller.credentials import controller_token, load_secret
from iris.controller.inspector import Inspector
from iris.controller.regions.region import Region
from iris.worker import credential
from iris.worker.actor import Worker
from iris.worker.inspector import WorkerInspector
from tests import joining
from tests.cluster.controller_state import controller_state

pytestmark = pytest.mark.xdist_group("roles")  # one cluster, these tests in file order

FAKE = "w-matrix"  # a worker that joined: it holds its own credential, nothing more
ROLES = ("client", "member", "admin", "worker", "worker-as-other", "controller",
         "controller-of-other", "revoked")
ANY = frozenset(ROLES)
ADMIN, MEMBER, WORKER, CONTROLLER = (frozenset({r}) for r in
                                     ("admin", "member", "worker", "controller"))
INTERNAL = frozenset()  # the receiving process itself only

# The written-down matrix: actor -> method -> the callers let through. Every public method
# of each actor class must be here (a new one must be placed before this test passes).
EXPECTED: dict[str, dict[str, frozenset]] = {
    "controller": {
        **dict.fromkeys(["budget_get", "budget_list", "checkpoint", "checkpoints", "dry_run",
                         "figures", "get_bundle", "has_bundle", "job_summary", "kill",
                         "kill_prefix", "list_jobs", "list_workers", "log_config",
                         "put_bundle", "regions", "restored", "results", "slices",
                         "snapshot", "state_dir", "status", "submit", "wait",
                         "wait_durable"], ANY),
        "join": MEMBER,
        **dict.fromkeys(["register_worker", "report", "goodbye", "worker_crashed",
                         "preemption_notice"], WORKER),
        **dict.fromkeys(["budget_set", "drain_worker", "revoke_worker", "stop_slices"], ADMIN),
        **dict.fromkeys(["front_reports", "front_hello"], CONTROLLER),  # report fronts
        **dict.fromkeys(["drain_hosts", "undrain_hosts", "hosts_gone", "inspect_target"],
                        INTERNAL),
    },
    "inspector": {
        **dict.fromkeys(["task_stack", "task_profile", "task_url", "task_exec", "exec_poll",
                         "exec_end"], ANY),
        "task_exec_as_operator": ADMIN,
    },
    "region": {
        **dict.fromkeys(["inventory", "stats", "live_reservations", "slices"], ANY),
        **dict.fromkeys(["sync", "sync_delta", "handle", "handle_many"], CONTROLLER),
        **dict.fromkeys(["stop_slices", "handle_requests"], INTERNAL),
    },
    # Any role; a name a task attempt holds changes only with its attempt's proof, checked
    # inside (tests/cluster/test_registry_proofs.py).
    "registry": dict.fromkeys(["register", "unregister", "renew", "resolve", "resolve_any",
                               "ended", "ended_of_job", "list"], ANY),
    "worker": {
        "status": ANY,
        **dict.fromkeys(["start_attempt", "stop_attempt", "drain"], CONTROLLER),
        **dict.fromkeys(["deliver", "leave", "machine_ending", "notice_sent"], INTERNAL),
    },
    "worker-inspector": dict.fromkeys(["stack", "profile", "exec_start", "exec_poll",
                                       "exec_end"], CONTROLLER),
}
CLASSES = {"controller": Controller, "inspector": Inspector, "region": Region,
           "registry": Registry, "worker": Worker, "worker-inspector": WorkerInspector}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("roles")
    with iris.local_cluster(workers=1, state_dir=root, stop_grace_s=2.0) as cluster, \
            iris.connect(cluster.address) as client:
        state = root / "controller"
        secret = load_secret(state)
        [real] = client.node.call(cluster.address, CONTROLLER_KEY, "list_workers").result(60)
        fake = joining.join(client.node, cluster.address, FAKE)
        # A worker that joined and left: its credential is revoked (goodbye), nothing more.
        gone = joining.join(client.node, cluster.address, "w-gone")
        client.node.call(cluster.address, CONTROLLER_KEY, "goodbye", ("w-gone", "tcp://x:1"),
                         auth=gone["credential"]).result(60)
        # What the controller presents on its commands to the real worker (its work dir).
        commands = credential.read(root / "worker-0", real["worker_id"]).command_token
        yield {
            "cluster": cluster, "node": client.node, "db": state / "jobs.sqlite3",
            "worker": real, "fake": fake, "gone": gone, "secret": secret,
            "commands": commands,
            "cluster_token": tokens.read(state / tokens.CLUSTER_TOKEN_FILE),
            "admin_token": tokens.read(state / tokens.ADMIN_TOKEN_FILE),
        }


def _where(world, actor: str) -> tuple[str, str]:
    address, real = world["cluster"].address, world["worker"]
    return {"controller": (address, CONTROLLER_KEY), "inspector": (address, INSPECT_KEY),
            "region": (address, region_key("local")), "registry": (address, REGISTRY_KEY),
            "worker": (real["address"], worker_key(real["worker_id"])),
            "worker-inspector": (real["address"], worker_inspect_key(real["worker_id"]))}[actor]


def _auth(world, role: str, at_worker: bool) -> bytes | None:
    secret = world["secret"]
    return {"client": None, "member": world["cluster_token"], "admin": world["admin_token"],
            "worker": world["fake"]["credential"], "worker-as-other": world["fake"]["credential"],
            # The controller's own token at its node; at a worker, its command token for it.
            "controller": world["commands"] if at_worker else controller_token(secret),
            # Another worker's command token (what that worker holds): no role here.
            "controller-of-other": world["fake"]["command_token"],
            "revoked": world["gone"]["credential"]}[role]


def _state(world) -> dict:
    node, address, real = world["node"], world["cluster"].address, world["worker"]
    return {"controller": controller_state(node, address, world["db"]),
            # Without its push number: the controller's keepalive (an empty push every
            # 5 s: service_placement.KEEPALIVE_S) moves it by itself.
            "region": {k: v for k, v in node.call(address, region_key("local"),
                                                  "inventory").result(60).items()
                       if k != "seq"},
            "worker": node.call(real["address"], worker_key(real["worker_id"]),
                                "status").result(60)}


def test_the_matrix_names_every_method_of_every_control_plane_actor():
    for actor, cls in CLASSES.items():
        assert set(EXPECTED[actor]) == set(spec_of(cls).methods), actor


def test_every_method_refuses_or_admits_every_role_as_written_and_refusals_change_nothing(
        world):
    node = world["node"]
    before = _state(world)
    seen: dict[tuple[str, str, str], str] = {}
    for actor, methods in EXPECTED.items():
        address, key = _where(world, actor)
        at_worker = actor.startswith("worker")
        for method, allowed in sorted(methods.items()):
            for role in ROLES:
                named = world["worker"]["worker_id"] if role == "worker-as-other" else FAKE
                args = (named, *range(1, 9))  # cannot bind: nothing runs once admitted
                fut = node.call(address, key, method, args, timeout_s=30,
                                auth=_auth(world, role, at_worker))
                exc = fut.exception(60)
                seen[(actor, method, role)] = type(exc).__name__
                if role in allowed:
                    assert isinstance(exc, BadArgumentsError), (actor, method, role, exc)
                else:
                    assert isinstance(exc, PermissionDeniedError), (actor, method, role, exc)
                    assert "not permitted" in str(exc)
                    assert _state(world) == before, (actor, method, role)
    assert _state(world) == before
    assert len(seen) == sum(len(m) for m in EXPECTED.values()) * len(ROLES)


def test_a_worker_speaking_as_another_is_told_why(world):
    with pytest.raises(PermissionDeniedError, match="only as itself"):
        world["node"].call(world["cluster"].address, CONTROLLER_KEY, "report",
                           (world["worker"]["worker_id"], []),
                           auth=world["fake"]["credential"]).result(60)


def _running_attempt(world, job) -> str:
    node, real = world["node"], world["worker"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = node.call(real["address"], worker_key(real["worker_id"]), "status").result(60)
        if status["attempts"] and job.status()["state"] == "running":
            return status["attempts"][0]
        time.sleep(0.1)
    raise AssertionError(f"{job.job_id} never ran: {job.status()}")


def test_forged_commands_and_region_pushes_with_a_workers_credentials_change_nothing(
        world, tmp_path):
    node, address, real = world["node"], world["cluster"].address, world["worker"]
    with iris.connect(address):
        job = iris.submit(["sleep", "600"])
        try:
            attempt = _running_attempt(world, job)
            before = _state(world)
            marker = tmp_path / "forged-start-ran"
            launch = {"attempt_id": "att-forged", "job_id": "/forged/x", "task_index": 0,
                      "attempt_number": 0, "env": {}, "bundle": None,
                      "entrypoint": {"kind": "command", "argv": ["touch", str(marker)]},
                      "log_store": {"kind": "local", "root": str(tmp_path)}}
            stop = {"attempt_id": attempt, "grace_s": 0.1, "reason": "forged"}
            held = [world["fake"]["credential"], world["fake"]["command_token"],
                    world["cluster_token"]]  # all a compromised host holds
            for auth in held:
                for method, arg in (("stop_attempt", stop), ("start_attempt", launch),
                                    ("drain", "forged")):
                    with pytest.raises(PermissionDeniedError):
                        node.call(real["address"], worker_key(real["worker_id"]), method,
                                  (arg,), auth=auth).result(60)
                with pytest.raises(PermissionDeniedError):
                    node.call(address, region_key("local"), "sync",
                              ([{"slice_id": "forged", "accelerator": "", "hosts": ["h"],
                                 "attributes": {}}], [], None, None, "forged", 1),
                              auth=auth).result(60)
            assert _state(world) == before
            assert job.status()["state"] == "running" and not marker.exists()
        finally:
            job.kill()


def test_a_revoked_worker_is_refused_at_its_next_call_and_the_others_are_not(world):
    node, address = world["node"], world["cluster"].address
    cred = joining.credential(node, address, "w-revoked")
    call = lambda method, *args, auth=cred: node.call(  # noqa: E731
        address, CONTROLLER_KEY, method, args, timeout_s=30, auth=auth).result(60)
    call("register_worker", "w-revoked", "tcp://127.0.0.1:9", {"cpu": "1"}, [])
    interval = call("report", "w-revoked", [])["interval_s"]
    told = call("revoke_worker", "w-revoked", auth=world["admin_token"])
    revoked_at = time.monotonic()
    assert told["worker_id"] == "w-revoked"
    # Its very next report, well within one interval; told it was revoked, not taken for
    # a client.
    with pytest.raises(PermissionDeniedError, match="credential of worker 'w-revoked' was "
                                                    "revoked"):
        call("report", "w-revoked", [])
    assert time.monotonic() - revoked_at < interval + 30  # (a busy machine: generous)
    with pytest.raises(PermissionDeniedError, match="revoked by an operator"):
        call("join", "w-revoked", auth=world["cluster_token"])  # barred from joining again
    workers = {w["worker_id"] for w in call("list_workers", auth=None)}
    assert "w-revoked" not in workers and world["worker"]["worker_id"] in workers
    # The fake worker that joined before is untouched: it still speaks as itself (and,
    # never registered, is told to register).
    assert call("report", FAKE, [], auth=world["fake"]["credential"])["reregister"]


def test_a_join_under_a_malformed_id_is_refused_naming_it_and_issues_nothing(world):
    node, address = world["node"], world["cluster"].address
    for bad in ("w-x\nw-y", "w x", "w" * 300):
        with pytest.raises(InvalidRequestError, match="worker_id"):
            node.call(address, CONTROLLER_KEY, "join", (bad,), timeout_s=30,
                      auth=world["cluster_token"]).result(60)
        with pytest.raises(InvalidRequestError, match="worker_id"):
            node.call(address, CONTROLLER_KEY, "revoke_worker", (bad,), timeout_s=30,
                      auth=world["admin_token"]).result(60)
    banned = world["db"].parent / tokens.REVOKED_WORKERS_FILE
    lines = banned.read_text().splitlines() if banned.exists() else []
    assert not {"w-x", "w-y", "w x", "w" * 300} & set(lines), lines


def test_a_goodbye_or_crash_for_an_old_address_leaves_the_new_registration_its_credential(
        world):
    """A worker restarted on its work dir joined and registered anew; its old process's
    watchdog then reports the old one crashed (with the credential file, now the new
    one's): the new registration and its credential stay."""
    node, address = world["node"], world["cluster"].address
    cred = joining.credential(node, address, "w-twice")
    call = lambda method, *args: node.call(  # noqa: E731
        address, CONTROLLER_KEY, method, args, timeout_s=30, auth=cred).result(60)
    call("register_worker", "w-twice", "tcp://127.0.0.1:11", {"cpu": "1"}, [])
    for method in ("worker_crashed", "goodbye"):
        call(method, "w-twice", "tcp://127.0.0.1:10")  # the old process's address
        assert not call("report", "w-twice", [])["reregister"], method
    call("goodbye", "w-twice", "tcp://127.0.0.1:11")
    with pytest.raises(PermissionDeniedError):
        call("report", "w-twice", [])


def test_revoking_a_worker_lost_long_ago_still_bars_its_id(world):
    """A worker lost more than 60 s ago holds no credential and no registration any more;
    an operator revoking it still bars its id, and is told it was not known."""
    node, address = world["node"], world["cluster"].address
    told = node.call(address, CONTROLLER_KEY, "revoke_worker", ("w-lost-long-ago",),
                     timeout_s=30, auth=world["admin_token"]).result(60)
    assert told == {"worker_id": "w-lost-long-ago", "attempts": [], "was": "unknown"}
    with pytest.raises(PermissionDeniedError, match="revoked by an operator"):
        node.call(address, CONTROLLER_KEY, "join", ("w-lost-long-ago",), timeout_s=30,
                  auth=world["cluster_token"]).result(60)
