"""A call to an actor whose process died fails with ActorDiedError, as in process and on Ray
(it was PeerUnavailableError after the 3 s heartbeat); one to an actor merely cut off (its
process stopped, not ended) stays PeerUnavailableError. Told apart by the registry: an
actor whose attempt ended (the controller withdrew it) or which unregistered has died; one
still listed, or whose lease only lapsed, is unreachable. And a call from the process that
killed the actor's job, made after the kill was answered, fails as ActorDiedError though
the process may still be stopping. Real workers, real SIGKILLs."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from pathlib import Path

import pytest

import iris
from iris.worker.records import is_alive

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


def test_a_call_to_an_actor_cut_off_but_alive_stays_peer_unavailable(jobs_cluster,
                                                                     wait_until):
    ref = iris.spawn(Pid, name=_unique("frozen"))
    pid = ref.pid().result(60)
    os.kill(pid, signal.SIGSTOP)  # alive, listed until its lease lapses, never withdrawn
    try:
        # kill(2) returns before every thread has stopped: a call sent at once could still
        # be answered (seen once in a loaded run, 0.1 s after the kill).
        wait_until(lambda: _all_threads_stopped(pid), 60, "the actor's process stopped")
        with pytest.raises(iris.PeerUnavailableError) as info:
            ref.pid().result(60)
        assert not isinstance(info.value, iris.ActorDiedError), info.value
    finally:
        os.kill(pid, signal.SIGCONT)


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of `pid` in the stopped state (T), as /proc shows it."""
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
            states.append(stat.rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state == "T" for state in states)


def stubborn_server(name: str) -> None:
    """Serve `name` and ignore the stop's SIGTERM: the process answers calls until the
    stop's grace ends, long after the kill was answered."""
    from iris.client.cluster import connect

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    connect().serve(Pid, name)
    threading.Event().wait()


def test_a_call_after_the_kill_was_answered_fails_as_actor_died(tmp_path):
    """The kill's answer comes before the actor's process stops (here it never would, for
    60 s): a call from the killing process after it fails at once, not answered."""
    name = "/" + _unique("stubborn")
    with iris.local_cluster(workers=1, stop_grace_s=60.0, state_dir=tmp_path):
        job = iris.submit(stubborn_server, name)
        ref = iris.resolve(name, timeout=120)
        also = iris.resolve(name)  # a second ref to it, never called
        pid = ref.pid().result(60)
        try:
            job.kill()
            for r in (ref, also, ref):
                with pytest.raises(iris.ActorDiedError, match="has died"):
                    r.pid().result(60)
            assert is_alive(pid)  # so its own stop did not do it: it would have answered
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
