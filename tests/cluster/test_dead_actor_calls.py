"""A call to an actor whose process died fails with ActorDiedError, as in process and on Ray
(it was PeerUnavailableError after the 3 s heartbeat); one to an actor merely cut off (its
process stopped, not ended) stays PeerUnavailableError. Told apart by the registry: an
actor whose attempt ended (the controller withdrew it) or which unregistered has died; one
still listed, or whose lease only lapsed, is unreachable. Real workers, real SIGKILLs."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

import iris

pytestmark = pytest.mark.slow


@iris.actor
class Pid:
    def pid(self) -> int:
        return os.getpid()


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_calls_to_an_actor_killed_with_sigkill_fail_as_actor_died(jobs_cluster):
    ref = iris.spawn(Pid, name=_unique("doomed"), max_retries_failure=0)
    never_called = iris.resolve(ref.name)  # bound to the same actor, no connection yet
    os.kill(ref.pid().result(60), signal.SIGKILL)
    for _ in range(2):  # the first meets the dying connection; the next, the dead name
        with pytest.raises(iris.ActorDiedError, match="has died"):
            ref.pid().result(60)
    with pytest.raises(iris.ActorDiedError, match="has died"):
        never_called.pid().result(60)


def test_a_call_to_an_actor_cut_off_but_alive_stays_peer_unavailable(jobs_cluster):
    ref = iris.spawn(Pid, name=_unique("frozen"))
    pid = ref.pid().result(60)
    os.kill(pid, signal.SIGSTOP)  # alive, listed until its lease lapses, never withdrawn
    try:
        with pytest.raises(iris.PeerUnavailableError) as info:
            ref.pid().result(60)
        assert not isinstance(info.value, iris.ActorDiedError), info.value
    finally:
        os.kill(pid, signal.SIGCONT)
