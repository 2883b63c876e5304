"""A local cluster with a dashboard and jobs in every state the pages show.

One worker advertising 3 CPUs: `run` and `victim` (1 CPU each, sleeping) keep it busy, so
`pend` (3 CPUs) waits with a "NO_CAPACITY" reason while 1 CPU stays free for jobs a test
runs; `ok` succeeded and `bad` failed with exit code 3.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import iris
from iris.actors import Node, actor
from iris.actors.current import current_context
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.base import HostInfo, SliceInfo, SliceState
from iris.controller.regions.autoscaler import Autoscaler, AutoscalerConfig, SliceUsage
from iris.dashboard import DashboardHandle, start_dashboard

# Polling the cluster from outside: on a loaded 2-core machine a task can take many seconds
# to reach RUNNING (environment build), so the deadline is generous.
WAIT_S = 90.0


@iris.actor
class Echo:
    def echo(self, value):
        return value


@dataclass
class Dash:
    ctx: iris.ClusterContext
    handle: DashboardHandle
    jobs: dict[str, iris.JobHandle]

    def get(self, path: str, headers: dict | None = None) -> tuple[int, dict | str]:
        return http(self.handle.url + path.lstrip("/"), headers=headers)


def http(url: str, *, data: bytes | None = None, headers: dict | None = None,
         method: str | None = None) -> tuple[int, dict | str]:
    """(status, JSON body or text) of one request; HTTP errors are answers, not exceptions."""
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            status, body, kind = reply.status, reply.read(), reply.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        status, body, kind = exc.code, exc.read(), exc.headers.get_content_type()
    text = body.decode()
    return status, (json.loads(text) if kind == "application/json" else text)


def wait_until(predicate, what: str, timeout_s: float = WAIT_S):
    deadline = SYSTEM_CLOCK.monotonic() + timeout_s
    while SYSTEM_CLOCK.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        SYSTEM_CLOCK.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def job_state(dash: Dash, job_id: str) -> str:
    return dash.get(f"api/job?id={job_id}")[1]["state"]


@pytest.fixture
def dash_current(dash):
    """The dashboard's cluster made current for this test (fixtures run in another context:
    without this, iris.submit would start a cluster of its own)."""
    token = current_context.set(dash.ctx)
    yield dash
    current_context.reset(token)


@contextlib.contextmanager
def cluster_with_dashboard(state_dir: Path, **cluster: object) -> Iterator[tuple]:
    """A local cluster, made current, with a dashboard on a free port: (context, handle)."""
    with iris.local_cluster(state_dir=state_dir, **cluster) as ctx:
        token = current_context.set(ctx)
        handle = start_dashboard(ctx.node, ctx.address, port=0)
        try:
            yield ctx, handle
        finally:
            handle.stop()
            current_context.reset(token)


@pytest.fixture(scope="session")
def dash(tmp_path_factory):
    with cluster_with_dashboard(tmp_path_factory.mktemp("dash"), workers=1, worker_cpu=3,
                                stop_grace_s=1.0) as (ctx, handle):
        Echo.serve("dash-echo")
        jobs = {
            "ok": iris.submit(["python", "-c", "print('hello from ok')"], name="ok"),
            "bad": iris.submit(["sh", "-c", "echo about to fail; exit 3"], name="bad"),
            # Longer than any session (the fixture is session-scoped: a whole loaded run once
            # outlasted 600 s and `run` "succeeded"); the teardown stops them.
            "run": iris.submit(["sh", "-c", "echo still running; sleep 86400"], name="run"),
            "victim": iris.submit(["sh", "-c", "echo kill me; sleep 86400"], name="victim"),
        }
        jobs["pend"] = iris.submit(["true"], name="pend", resources=iris.Resources(cpu=3))
        jobs["ok"].wait(WAIT_S)
        jobs["bad"].wait(WAIT_S)
        dash = Dash(ctx, handle, jobs)
        wait_until(lambda: dash.get(f"api/job?id={jobs['pend'].job_id}")[1]
                   ["pending_reason"], "the pending job's reason in the snapshot")
        for name in ("run", "victim"):
            wait_until(lambda n=name: job_state(dash, jobs[n].job_id) == "running",
                       f"{name} to run")
        yield dash


def autoscaler_status() -> dict:
    """One region's capacity entry as the real autoscaler kernel reports it, after: two
    slices created for pending work, one create refused (stock-out: its zone backs off), one
    slice READY with a busy host, and an older slice preempted (deleted at once)."""
    group = ScaleGroupConfig(name="tpu16", region="us-central2", accelerator_type="tpu",
                             accelerator_variant="v5litepod-16", hosts_per_slice=4,
                             accelerators_per_host=4, zones=("us-central2-b", "us-central2-c"),
                             max_slices=3)
    kernel = Autoscaler("us-central2", [group], AutoscalerConfig(scale_up_delay_s=0),
                        id_prefix="iris")
    first, second = (c.slice_id for c in kernel.decide(100.0, [], {}, {"tpu16": 2}))
    kernel.create_failed("tpu16", "us-central2-b", "ZONE_RESOURCE_POOL_EXHAUSTED", True, 101.0,
                         slice_id=second)
    hosts = tuple(HostInfo(f"h{i}", f"10.0.0.{i}") for i in range(4))
    kernel.decide(130.0, [SliceInfo(first, "tpu16", "us-central2-b", SliceState.READY, hosts),
                          SliceInfo("iris-old-7", "tpu16", "us-central2-c",
                                    SliceState.PREEMPTED, hosts)],
                  {first: SliceUsage(4, 1)}, {})
    return kernel.status(160.0)


@pytest.fixture(scope="session")
def capacity_snapshot() -> dict:
    return {"at": SYSTEM_CLOCK.wall(), "jobs_by_state": {}, "workers": [],
            "capacity": [autoscaler_status()]}


@actor
class SnapshotController:
    """Stands in for the controller actor where a test needs a snapshot a local cluster does
    not produce (an autoscaled region): it serves that snapshot and a state dir, nothing else.
    The dashboard reaches it the way it reaches the real one: node calls over ZeroMQ."""

    def __init__(self, snapshot: dict, state_dir: str):
        self._snapshot, self._state_dir = snapshot, state_dir

    def snapshot(self) -> dict:
        return self._snapshot

    def state_dir(self) -> str:
        return self._state_dir


@pytest.fixture
def capacity_dash(tmp_path, capacity_snapshot):
    """A dashboard over a controller whose snapshot holds the autoscaler_status() region."""
    with Node() as node:
        node.host(CONTROLLER_KEY, SnapshotController, (capacity_snapshot, str(tmp_path)))
        handle = start_dashboard(node, node.address, port=0)
        try:
            yield handle
        finally:
            handle.stop()


CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
# The flags shared/recipes.md section 6 found to work in this container.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
        "--disable-dev-shm-usage"]
TIMEOUT_MS = 60_000  # a loaded 2-core machine; pages refresh every 2 s

@pytest.fixture(scope="module")
def browser():
    # A missing playwright is a broken test environment (it is in the test extra), not a skip.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    context.close()
