"""Worker credentials (controller/credentials.py), pure: one per worker, granted and revoked
at the node's table; a live id is not issued again, a banned one never (across restarts);
lost workers' credentials are swept; command tokens are per worker and per join, so one
got by joining under an id earlier commands nobody later."""

from __future__ import annotations

import pytest

from iris.base.errors import (
    ConflictError,
    InvalidRequestError,
    OverloadedError,
    PermissionDeniedError,
)
from iris.controller.credentials import (
    JOIN_GRACE_S,
    LIVE_S,
    Credentials,
    controller_token,
)

SECRET = b"s" * 32


def _working(grants: dict, credential: bytes) -> bool:
    """The credential holds the worker role at the node (a revoked one is named so)."""
    return grants.get(credential, (None,))[0] == "worker"


def _held(grants: dict) -> int:
    return sum(role == "worker" for role, _ in grants.values())


@pytest.fixture
def table(tmp_path):
    grants: dict[bytes, tuple[str, str]] = {}
    creds = Credentials(tmp_path, lambda t, role, who: grants.__setitem__(t, (role, who)),
                        lambda t: grants.pop(t, None))
    return creds, grants, tmp_path


def test_each_worker_gets_its_own_credential_naming_it(table):
    creds, grants, _ = table
    a, b = creds.issue("w-a", 0.0, None), creds.issue("w-b", 0.0, None)
    assert a["credential"] != b["credential"]
    assert grants[a["credential"]] == ("worker", "w-a")
    assert grants[b["credential"]] == ("worker", "w-b")
    assert creds.command_token("w-a") == a["command_token"] != b["command_token"]
    assert controller_token(SECRET) not in (a["command_token"], b["command_token"])
    assert creds.command_token("w-c") is None  # never joined: commanded with nothing


def test_a_command_token_got_by_an_earlier_join_under_an_id_is_not_the_next_ones(table):
    # A host joining under an id while it is free (after a controller restart, a lost
    # worker) must not keep a token that commands the real worker once it joins again.
    creds, _, _ = table
    stolen = creds.issue("w-a", 0.0, None)
    again = creds.issue("w-a", 100.0, heard_s_ago=None)
    assert again["command_token"] != stolen["command_token"]
    assert creds.command_token("w-a") == again["command_token"]
    creds.revoke("w-a")
    assert creds.command_token("w-a") is None


def test_revoking_one_leaves_the_others(table):
    creds, grants, _ = table
    a, b = creds.issue("w-a", 0.0, None), creds.issue("w-b", 0.0, None)
    assert creds.revoke("w-a") and not creds.revoke("w-a")
    assert not _working(grants, a["credential"]) and _working(grants, b["credential"])


def test_a_registered_id_is_issued_again_only_to_its_holder_until_it_is_lost(table):
    creds, grants, _ = table
    first = creds.issue("w-a", 0.0, None)
    with pytest.raises(ConflictError, match="is live at tcp://h:1"):
        creds.issue("w-a", LIVE_S + 1.0, heard_s_ago=0.5, address="tcp://h:1")  # another host
    # Silent past LIVE_S (a blip), not lost: another host holding the cluster token is
    # refused, and the worker keeps its credential.
    with pytest.raises(ConflictError, match="registered at tcp://h:1 and silent for 6 s"):
        creds.issue("w-a", 100.0, heard_s_ago=LIVE_S + 1.0, address="tcp://h:1")
    assert _working(grants, first["credential"])
    # Its holder, showing it, gets a new one (a worker refused once, joining again).
    again = creds.issue("w-a", 100.0, heard_s_ago=LIVE_S + 1.0, proof=first["credential"])
    assert not _working(grants, first["credential"]) and _working(grants, again["credential"])
    creds.revoke("w-a")  # lost: swept by the controller
    assert _working(grants, creds.issue("w-a", 200.0, None)["credential"])


def test_a_joined_id_never_registered_is_issued_again_once_its_join_is_old(table):
    """A join whose answer was lost: the host joins again with the cluster token alone."""
    creds, grants, _ = table
    first = creds.issue("w-a", 0.0, None)
    with pytest.raises(ConflictError, match="is live"):
        creds.issue("w-a", 1.0, None)
    again = creds.issue("w-a", LIVE_S + 1.0, None)
    assert not _working(grants, first["credential"]) and _working(grants, again["credential"])


def test_a_banned_id_may_not_join_again_even_after_a_restart(table):
    creds, grants, state_dir = table
    a = creds.issue("w-a", 0.0, None)
    creds.ban("w-a")
    assert not _working(grants, a["credential"])
    with pytest.raises(PermissionDeniedError, match="revoked by an operator"):
        creds.issue("w-a", 100.0, None)
    restarted = Credentials(state_dir, lambda *a: None, lambda t: None)
    with pytest.raises(PermissionDeniedError):
        restarted.issue("w-a", 0.0, None)
    restarted.issue("w-b", 0.0, None)  # others join as before


def test_unregistered_workers_credentials_are_swept_after_the_join_grace(table):
    creds, grants, _ = table
    a, b = creds.issue("w-a", 0.0, None), creds.issue("w-b", 0.0, None)
    assert creds.sweep({"w-b": object()}, JOIN_GRACE_S - 1.0) == []  # w-a may still register
    assert creds.sweep({"w-b": object()}, JOIN_GRACE_S + 1.0) == ["w-a"]
    assert not _working(grants, a["credential"]) and _working(grants, b["credential"]) and len(creds) == 1


@pytest.mark.parametrize("worker_id", ["w-a\nw-b", "w a", "w-\x00", "w-\t", "", "w" * 257])
def test_an_id_that_cannot_be_one_line_of_the_banned_file_is_refused(table, worker_id):
    creds, grants, state_dir = table
    with pytest.raises(InvalidRequestError, match="worker_id"):
        creds.issue(worker_id, 0.0, None)
    with pytest.raises(InvalidRequestError, match="worker_id"):
        creds.ban(worker_id)
    assert not grants and not creds.banned
    assert Credentials(state_dir, lambda *a: None, lambda t: None).banned == set()


def test_a_join_flood_is_bounded_and_refused_for_load_until_the_sweep_reclaims_it(tmp_path):
    grants: dict[bytes, tuple[str, str]] = {}
    creds = Credentials(tmp_path, lambda t, role, who: grants.__setitem__(t, (role, who)),
                        lambda t: grants.pop(t, None), max_held=3)
    for i in range(3):
        creds.issue(f"w-{i}", 0.0, None)
    with pytest.raises(OverloadedError, match="3 worker credentials"):
        creds.issue("w-flood", 1.0, None)
    assert len(creds) == 3 and _held(grants) == 3
    creds.issue("w-0", LIVE_S + 1.0, heard_s_ago=None)  # a held id joins again: no growth
    assert len(creds) == 3
    creds.sweep({"w-0": object()}, JOIN_GRACE_S + 1.0)  # never registered: reclaimed
    creds.issue("w-flood", JOIN_GRACE_S + 2.0, None)
    assert len(creds) == 2 == _held(grants)


# ------------------------------------------------------------ across a controller restart


def _restarted(state_dir, now=1000.0):
    grants: dict[bytes, tuple[str, str]] = {}
    creds = Credentials(state_dir, lambda t, role, who: grants.__setitem__(t, (role, who)),
                        lambda t: grants.pop(t, None), now=now)
    return creds, grants


def test_after_a_restart_a_held_id_is_refused_to_a_stranger_and_given_to_its_holder(table):
    creds, _, state_dir = table
    real = creds.issue("w-a", 0.0, None)
    restarted, grants = _restarted(state_dir)
    assert len(restarted) == 1 and restarted.command_token("w-a") is None
    with pytest.raises(ConflictError, match="before the controller restarted"):
        restarted.issue("w-a", 1000.0 + LIVE_S + 1.0, None)  # only the cluster token
    with pytest.raises(ConflictError):
        restarted.issue("w-a", 1001.0, None, proof=b"x" * 32)  # a guess
    again = restarted.issue("w-a", 1001.0, None, proof=real["credential"])
    assert grants[again["credential"]] == ("worker", "w-a")
    assert restarted.command_token("w-a") == again["command_token"]


def test_the_state_dir_holds_no_credential_that_can_be_replayed(table):
    creds, _, state_dir = table
    issued = creds.issue("w-a", 0.0, None)
    for path in state_dir.iterdir():
        raw = path.read_bytes()
        for secret in (issued["credential"], issued["command_token"]):
            assert secret not in raw and secret.hex().encode() not in raw, path.name
    assert (state_dir / "worker_credentials").stat().st_mode & 0o777 == 0o600


def test_a_restored_credential_not_claimed_is_swept_after_the_join_grace(table):
    creds, _, state_dir = table
    creds.issue("w-a", 0.0, None)
    restarted, _ = _restarted(state_dir, now=1000.0)
    assert restarted.sweep({}, 1000.0 + JOIN_GRACE_S - 1.0) == []
    assert restarted.sweep({}, 1000.0 + JOIN_GRACE_S + 1.0) == ["w-a"]
    restarted.issue("w-a", 1000.0 + JOIN_GRACE_S + 2.0, None)  # lost: its id is free


def test_revoked_and_banned_credentials_stay_so_across_a_restart(table):
    creds, _, state_dir = table
    creds.issue("w-a", 0.0, None), creds.issue("w-b", 0.0, None)
    creds.issue("w-c", 0.0, None)
    creds.revoke("w-a")
    creds.ban("w-b")
    restarted, _ = _restarted(state_dir)
    assert len(restarted) == 1  # w-c alone is held
    restarted.issue("w-a", 1001.0, None)  # revoked, not barred: joins as any new host
    with pytest.raises(PermissionDeniedError, match="revoked by an operator"):
        restarted.issue("w-b", 1001.0, None)


def test_the_credential_file_is_compacted_and_a_torn_last_line_is_ignored(table):
    creds, _, state_dir = table
    for i in range(3000):  # one id joining again and again: the file does not grow
        creds.issue("w-a", float(i) * 100, None)
    path = state_dir / "worker_credentials"
    assert len(path.read_text().splitlines()) < 2100
    with open(path, "a") as f:
        f.write("+ w-torn 12ab")  # a crash mid-line
    restarted, _ = _restarted(state_dir)
    assert len(restarted) == 1


def test_a_revoked_credential_is_told_so_not_taken_for_a_client(table):
    creds, grants, _ = table
    a = creds.issue("w-a", 0.0, None)
    creds.revoke("w-a")
    assert grants[a["credential"]] == ("revoked", "w-a")


def test_revoked_credentials_kept_to_name_them_are_bounded(tmp_path):
    grants: dict[bytes, tuple[str, str]] = {}
    creds = Credentials(tmp_path, lambda t, role, who: grants.__setitem__(t, (role, who)),
                        lambda t: grants.pop(t, None), max_held=3)
    for i in range(10):
        creds.issue(f"w-{i}", 0.0, None)
        creds.revoke(f"w-{i}")
    assert len(grants) == 3


def test_a_proof_that_is_not_a_credential_is_refused(table):
    creds, grants, _ = table
    with pytest.raises(InvalidRequestError, match="proof"):
        creds.issue("w-a", 0.0, None, proof="not bytes")
    assert not grants and len(creds) == 0
