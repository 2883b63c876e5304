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
    assert a["credential"] not in grants and b["credential"] in grants


def test_a_live_id_is_not_issued_again_but_a_silent_one_is(table):
    creds, grants, _ = table
    first = creds.issue("w-a", 0.0, None)
    with pytest.raises(ConflictError, match="is live at tcp://h:1"):
        creds.issue("w-a", LIVE_S + 1.0, heard_s_ago=0.5, address="tcp://h:1")  # another host
    assert first["credential"] in grants
    again = creds.issue("w-a", 100.0, heard_s_ago=LIVE_S + 1.0)  # a restarted worker
    assert first["credential"] not in grants and again["credential"] in grants


def test_a_banned_id_may_not_join_again_even_after_a_restart(table):
    creds, grants, state_dir = table
    a = creds.issue("w-a", 0.0, None)
    creds.ban("w-a")
    assert a["credential"] not in grants
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
    assert a["credential"] not in grants and b["credential"] in grants and len(creds) == 1


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
    assert len(creds) == 3 and len(grants) == 3
    creds.issue("w-0", LIVE_S + 1.0, heard_s_ago=None)  # a held id joins again: no growth
    assert len(creds) == 3
    creds.sweep({"w-0": object()}, JOIN_GRACE_S + 1.0)  # never registered: reclaimed
    creds.issue("w-flood", JOIN_GRACE_S + 2.0, None)
    assert len(creds) == 2 == len(grants)
