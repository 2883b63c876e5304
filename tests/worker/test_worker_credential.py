"""A worker's credential file and its rejoin (worker/credential.py), pure: what a worker
without a credential shows at its next join, and how long a barred one waits."""

from __future__ import annotations

from iris.worker import credential
from iris.worker.credential import BARRED_RETRY_MAX_S, BARRED_RETRY_S, Credential, Rejoin


def test_a_barred_join_waits_doubling_from_30_s_up_to_10_min():
    waits = [credential.barred_backoff(n) for n in range(1, 10)]
    assert waits[:3] == [BARRED_RETRY_S, 2 * BARRED_RETRY_S, 4 * BARRED_RETRY_S]
    assert max(waits) == waits[-1] == BARRED_RETRY_MAX_S == 600.0
    assert credential.barred_backoff(10_000) == BARRED_RETRY_MAX_S  # no overflow
    rejoin = Rejoin()
    assert rejoin.barred(100.0) == BARRED_RETRY_S and rejoin.after == 100.0 + BARRED_RETRY_S
    assert rejoin.barred(200.0) == 2 * BARRED_RETRY_S


def test_a_worker_shows_the_credential_it_kept_only_when_it_has_none_for_this_controller(
        tmp_path):
    kept = Credential("w-a", "tcp://old:1", b"o" * 32, b"k" * 32)
    credential.write(tmp_path, kept)
    assert Rejoin.start(tmp_path, "w-a", None).proof() == (b"o" * 32,)
    assert Rejoin.start(tmp_path, "w-a", kept).proof() == ()  # held: no join to make
    assert Rejoin.start(tmp_path, "w-b", None).proof() == ()  # another worker's file
    assert (tmp_path / credential.FILE).stat().st_mode & 0o777 == 0o600
