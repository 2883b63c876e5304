"""Two controllers on one checkpoint prefix (checkpoint/ownership.py): one owner at a time, a
dead owner told from a live one by whether it renews, a taken-over owner fenced before it
writes another byte, and a restore that prefers the newest owner's checkpoints. The rules
alone, then against a real fake-gcs-server through the real client."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest

from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import ConflictError, StorageError
from iris.controller.checkpoint import ownership
from iris.controller.checkpoint.ownership import LEASE_S, Lease, Owner, may_claim
from iris.controller.checkpoint.policy import PolicyConfig
from iris.controller.checkpoint.restore import _newest
from iris.controller.checkpoint.runner import Checkpointer
from iris.controller.jobs.store import JobStore
from tests.controller.test_job_support import Harness, spec

pytestmark = pytest.mark.timeout(300)

A = Owner("vm-a", "/var/lib/iris", 100, epoch=3, renewed_at=1000.0)
B = Owner("vm-b", "/var/lib/iris", 200)


# ------------------------------------------------------------ the rules


def test_a_free_or_released_prefix_is_claimed():
    assert may_claim(None, B, 1000.0, take_over=False) is None
    assert may_claim(replace(A, released=True), B, 1001.0, take_over=False) is None


def test_the_same_controller_restarted_reclaims_at_once():
    restarted = replace(A, pid=101, renewed_at=0.0)
    assert may_claim(A, restarted, 1001.0, take_over=False) is None


def test_another_controller_that_renewed_recently_holds_it_until_its_lease_lapses():
    held = may_claim(A, B, 1000.0 + LEASE_S - 1, take_over=False)
    assert held is not None and "vm-a" in held and "/var/lib/iris" in held
    assert may_claim(A, B, 1000.0 + LEASE_S, take_over=False) is None
    assert may_claim(A, B, 1001.0, take_over=True) is None


def test_a_restore_prefers_the_newest_owner_over_a_later_name():
    listed = [{"name": "2026-11-25T10-00-00Z", "epoch": 2},
              {"name": "2026-11-25T10-00-05Z", "epoch": 1},  # a fenced owner's late upload
              {"name": "2026-11-25T09-00-00Z"}]  # from before owners were recorded
    assert _newest(listed) == "2026-11-25T10-00-00Z"


def test_a_garbled_owner_record_is_refused_naming_it():
    with pytest.raises(StorageError, match="gs://b/p/OWNER: not an Iris owner record"):
        ownership.decode(b"{not json", "gs://b/p/OWNER")


# ------------------------------------------------------------ against GCS


class FakeWall:
    """Wall time that moves only when the claim sleeps: a lease lapses without waiting."""

    def __init__(self, start: float):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


def test_claim_release_and_reclaim_without_waiting(bucket):
    said: list[str] = []
    first = Lease.claim(bucket, A, say=said.append)
    assert first.owner.epoch == 1
    first.release(SYSTEM_CLOCK.wall())
    second = Lease.claim(bucket, B, say=said.append)
    assert second.owner.epoch == 2 and said == []  # released: no wait, no take-over


def test_a_silent_owner_is_presumed_dead_after_its_lease(bucket):
    Lease.claim(bucket, A)  # and never renews: its machine is gone
    wall, said = FakeWall(SYSTEM_CLOCK.wall()), []
    lease = Lease.claim(bucket, B, wall=wall, say=said.append, sleep=wall.sleep)
    assert lease.owner.epoch == 2
    assert "waiting up to" in said[0] and "vm-a" in said[0]
    assert said[-1].startswith("took over gs://")


def test_a_live_owner_is_refused_by_name(bucket):
    live = Lease.claim(bucket, A)
    live.keep_renewing(None)  # every RENEW_S, as a serving controller does
    said: list[str] = []
    with pytest.raises(ConflictError, match="vm-a .*is alive .*--take-over"):
        Lease.claim(bucket, B, say=said.append)  # real time: waits for A's next renewal
    assert "waiting up to" in said[0]
    live.renew(SYSTEM_CLOCK.wall())  # A still owns it
    live.release(SYSTEM_CLOCK.wall())


def test_take_over_fences_the_old_owner_before_it_writes_a_checkpoint(tmp_path, bucket,
                                                                      wait_until):
    store = JobStore(tmp_path / "a")
    Harness(store=store).submit(spec("job0", request_id="req-0"))
    old = Lease.claim(bucket, Owner.me(tmp_path / "a"))
    fenced: list[str] = []
    runner = Checkpointer(tmp_path / "a", bucket, PolicyConfig(), SYSTEM_CLOCK,
                          lambda result, ticket: None, old, fenced.append)
    assert "error" not in runner.take("before")  # the owner checkpoints
    assert runner.status()["owner"]["epoch"] == 1

    new = Lease.claim(bucket, B, take_over=True, say=lambda _: None)
    assert new.owner.epoch == 2
    after = runner.take("after")
    assert "vm-b" in after["error"] and "took over" in after["error"], after
    assert len(bucket.list()) == 1  # nothing more from the fenced owner
    with pytest.raises(ownership.FencedError):
        old.renew(SYSTEM_CLOCK.wall())
    # Its renewing thread tells the controller, which then stops serving.
    wait_until(lambda: fenced, what="the old owner's on_fenced")
    assert "vm-b" in fenced[0]
    old.release(SYSTEM_CLOCK.wall())  # a fenced owner's clean stop writes nothing
    store.close()
    new.renew(SYSTEM_CLOCK.wall())  # the new owner is untouched


def test_an_owner_whose_address_refuses_connections_is_claimed_at_once(bucket):
    """Killed with its port closed (kill -9, same VM restarted on another state dir): the
    replacement need not wait out the lease, so running work is adopted before the workers'
    own 15 s leases lapse."""
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        dead = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        alive = f"tcp://127.0.0.1:{listening.getsockname()[1]}"
        assert ownership.refuses_connections(dead)
        assert not ownership.refuses_connections(alive)
        assert not ownership.refuses_connections("tcp://0.0.0.0:5555")  # proves nothing

    Lease.claim(bucket, replace(A, address=dead))
    said: list[str] = []
    lease = Lease.claim(bucket, B, say=said.append, sleep=_no_wait)
    assert lease.owner.epoch == 2
    assert "nothing answers at" in said[0]


def _no_wait(seconds: float) -> None:
    raise AssertionError("the claim waited for a dead owner's lease")
