"""An actor's name after its actor stops or dies: served again, it resolves to the new actor,
never the old one (iris/actors/holders.py). Real workers, real processes, real SIGKILLs."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid

import pytest

import iris
from iris.actors.registry import RENEW_INTERVAL_S
from iris.base.resources import Resources
from iris.client.jobs import _controller
from iris.worker.records import is_alive
from tests.conftest import watchdogs_of

pytestmark = pytest.mark.slow


@iris.actor
class Tagged:
    def __init__(self, tag: str):
        self.tag = tag

    def who(self) -> tuple[str, int]:
        return self.tag, os.getpid()


def stubborn_server(name: str) -> None:
    """Serve `name` outside iris.spawn and ignore the stop's SIGTERM: the process lives on
    (renewing its lease) until the stop's grace ends."""
    from iris.client.cluster import connect

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    connect().serve(Tagged, name, "stubborn")
    threading.Event().wait()


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.mark.parametrize("how", ["job killed", "process SIGKILLed"])
def test_a_respawn_right_after_the_actor_stopped_reaches_the_new_actor(jobs_cluster, how):
    name = _unique("svc")
    old, job = iris.spawn_job(Tagged, "first", name=name, max_retries_failure=0)
    _, pid = old.who().result(60)
    if how == "job killed":
        job.kill()
    else:  # nobody stops it through Iris: its worker sees the exit and reports it
        os.kill(pid, signal.SIGKILL)
    new = iris.spawn(Tagged, "second", name=name)  # at once: no waiting for the old name
    assert new.address != old.address
    assert new.who().result(60)[0] == "second"
    assert iris.resolve(name).who().result(60)[0] == "second"
    assert [r.address for r in iris.resolve_all(name).refs] == [new.address]


def test_a_spawn_under_a_name_a_live_actor_holds_is_refused_naming_it(jobs_cluster):
    """As in process (ConflictError): not a second actor under the name. Two spawns at once
    cannot both win: the registry decides, on its one loop."""
    name = _unique("taken")
    first, first_job = iris.spawn_job(Tagged, "first", name=name)
    _, pid = first.who().result(60)
    with pytest.raises(iris.errors.ConflictError, match=f"/{name}: an actor is already registered"):
        iris.spawn(Tagged, "second", name=name)
    assert first.who().result(60) == ("first", pid)  # untouched
    assert [r.address for r in iris.resolve_all(name).refs] == [first.address]
    first_job.kill()
    assert iris.spawn(Tagged, "third", name=name).who().result(60)[0] == "third"


def test_two_spawns_of_one_name_at_once_give_one_actor(jobs_cluster):
    name = _unique("race")
    outcomes: list = [None, None]

    def spawn(i: int) -> None:
        try:
            outcomes[i] = iris.spawn(Tagged, f"racer-{i}", name=name)
        except iris.errors.ConflictError as exc:
            outcomes[i] = exc

    ctx = iris.current()
    threads = [threading.Thread(target=lambda i=i: _in(ctx, spawn, i)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    won = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(won) == 1 and sum(isinstance(o, iris.errors.ConflictError) for o in outcomes) == 1, \
        outcomes
    assert [r.address for r in iris.resolve_all(name).refs] == [won[0].address]


def _in(ctx, fn, *args) -> None:
    with contextlib.ExitStack() as stack:
        from iris.actors.current import current_context

        token = current_context.set(ctx)
        stack.callback(current_context.reset, token)
        fn(*args)


def test_an_ended_attempts_name_goes_at_once_though_its_process_still_runs(tmp_path,
                                                                          wait_until):
    """The controller withdraws the name when it ends the attempt: not the process's own
    goodbye (it ignores SIGTERM), not its lease (it still renews), and its renewal may not
    register the name again."""
    name = "/" + _unique("stubborn")
    with iris.local_cluster(workers=1, stop_grace_s=60.0, state_dir=tmp_path) as ctx:
        job = iris.submit(stubborn_server, name)
        ref = iris.resolve(name, timeout=120)
        _, pid = ref.who().result(60)
        try:
            job.kill()
            wait_until(lambda: name not in {a["name"] for a in ctx.list_actors("/")},
                       what=f"{name} to leave the registry")
            assert is_alive(pid)  # so the lease did not do it: the process still renews
            threading.Event().wait(3 * RENEW_INTERVAL_S)  # three renewals: none brings it back
            assert name not in {a["name"] for a in ctx.list_actors("/")}
            assert is_alive(pid)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _work_dir(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    return argv[argv.index("--work-dir") + 1]


def test_a_host_that_vanished_never_resolves_once_the_name_is_served_again(tmp_path):
    """Worker, watchdog and actor SIGKILLed at once: nobody tells the controller (it learns
    after the worker's silence) and the name's lease still runs; the respawn elsewhere is
    what every resolve of the name returns from then on."""
    name = _unique("host")
    with iris.local_cluster(workers=2, worker_cpu=2, stop_grace_s=2.0,
                            state_dir=tmp_path) as ctx:
        # A whole worker's CPUs: the respawn cannot be placed on the dead worker.
        old, job = iris.spawn_job(Tagged, "first", name=name, resources=Resources(cpu=2),
                                  max_retries_preemption=0)
        _, actor_pid = old.who().result(60)
        worker_id = job.tasks()[0]["worker_id"]
        workers = {w["worker_id"]: w for w in _controller(ctx, "list_workers")}
        worker_pid = int(workers[worker_id]["attributes"]["pid"])
        for pid in [*watchdogs_of(_work_dir(worker_pid)), worker_pid, actor_pid]:
            os.kill(pid, signal.SIGKILL)
        new = iris.spawn(Tagged, "second", name=name, resources=Resources(cpu=2))
        assert new.address != old.address
        assert new.who().result(60)[0] == "second"
        for _ in range(5):  # past the old lease: before, during and after it ran out
            ref = iris.resolve(name)
            assert ref.address == new.address, f"{name} resolved to the dead {ref.address}"
            assert [r.address for r in iris.resolve_all(name).refs] == [new.address]
            assert ref.who().result(60)[0] == "second"
            threading.Event().wait(RENEW_INTERVAL_S)
