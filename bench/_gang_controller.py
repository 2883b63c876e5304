"""Gangs placed per second THROUGH THE CONTROLLER, for bench/gang.py (issue 12).

gangs_per_s_controller: a real Controller actor on its own node (SQLite in a temp dir) with
its in-process Region actors; 3 regions x `n_slices / 3` v5litepod-16 slices of 4 hosts,
registered as workers with the cluster token (they are not processes: their address is a
node that hosts no worker, so each start_attempt is refused at once and costs nothing
further). Then `n_slices` gang jobs (one v5litepod-16 slice each, 4 tasks) are submitted at
once, every call in flight together. Figure = gangs whose 4 tasks are all assigned / wall
time from the first submit to the last assignment, read by polling `list_jobs` every 20 ms
(one cheap call; it is the same for before and after). controller_cpu_ms_per_gang: CPU
time of the Controller actor's thread over the same span, per gang placed (the polling
included): on a loaded machine it moves much less than the rate does. Each placement goes through the
scheduler pass, a reserve in every region, a commit in one and aborts in the others.

multislice_gangs_per_s_controller (`slices=2`): the same fleet, but each job asks for 2
whole slices (`count=2`, 8 tasks), so half as many gangs fill it; each gang's 2 slices are
reserved in one round in one region.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import uuid
from pathlib import Path

from iris.actors import Node, NodeConfig, tokens
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK
from iris.base.resources import Resources
from iris.controller.main import host_controller
from iris.controller.service import ControllerConfig

REGIONS = ("us-east", "us-central", "eu-west")
_GB = 10**9
_ACCEL = "v5litepod-16"
_CONTROLLER_THREAD = "iris-actor-/iris/controller"  # the Controller actor's thread


def bench_gangs_controller(n_slices: int, timeout_s: float = 300.0, slices: int = 1) -> dict:
    # Refused start_attempt calls are logged as warnings, one per task: not the figure.
    logging.getLogger("iris.controller.actor").setLevel(logging.ERROR)
    per_region = max(1, n_slices // len(REGIONS))
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp) / "controller"
        server = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
        client = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
        try:
            # No heartbeats are sent: the hosts must not be declared lost mid-run.
            host_controller(server, ControllerConfig(state_dir=state_dir,
                                                     worker_dead_after_s=3600.0))
            token = tokens.load_or_create(state_dir / tokens.CLUSTER_TOKEN_FILE)
            _register(client, server.address, token, per_region)
            return _place(client, server.address, per_region * len(REGIONS) // slices,
                          timeout_s, slices)
        finally:
            client.stop()
            server.stop()


def _register(client: Node, address: str, token: bytes, per_region: int) -> None:
    todo = []
    for region in REGIONS:
        for s in range(per_region):
            sid = f"{region}-s{s}"
            attrs = {"region": region, "zone": f"{region}-a", "slice_id": sid,
                     "accelerator_type": _ACCEL, "accelerator_count": "4", "cpu": "8",
                     "memory": str(64 * _GB)}
            todo += [(f"{sid}-h{h}", attrs) for h in range(4)]
    # Each host joins with the cluster token, then speaks with its own credential.
    joins = {w: client.call(address, CONTROLLER_KEY, "join", (w,), timeout_s=60.0, auth=token)
             for w, _ in todo}
    creds = {w: fut.result(60.0)["credential"] for w, fut in joins.items()}
    while todo:  # the controller admits 500 registrations a second; the rest retry
        futs = [(w, a, client.call(address, CONTROLLER_KEY, "register_worker",
                                   (w, client.address, a, [], []), timeout_s=60.0,
                                   auth=creds[w]))
                for w, a in todo]
        todo = [(w, a) for w, a, f in futs if f.exception(timeout=60.0) is not None]
        if todo:
            SYSTEM_CLOCK.sleep(0.2)


def _thread_cpu_s(name: str) -> float:
    """CPU seconds the named thread of this process has used (Linux /proc; 0 elsewhere):
    a figure a busy machine changes much less than wall time."""
    for t in threading.enumerate():
        if t.name == name and t.native_id is not None:
            try:
                fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text()
            except OSError:
                return 0.0
            utime, stime = fields.rsplit(")", 1)[1].split()[11:13]
            return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")
    return 0.0


def _place(client: Node, address: str, n_gangs: int, timeout_s: float, slices: int) -> dict:
    resources = Resources(tpu=_ACCEL, cpu=1, count=slices).to_dict()
    cpu0 = _thread_cpu_s(_CONTROLLER_THREAD)
    t0 = SYSTEM_CLOCK.monotonic()
    futs = [client.call(address, CONTROLLER_KEY, "submit", ({
        "name": f"gang-{i}", "entrypoint": {"kind": "command", "argv": ["true"]},
        "replicas": 1, "resources": resources, "env": {}, "pip": [], "constraints": {},
        "user": "bench", "request_id": uuid.uuid4().hex},), timeout_s=timeout_s)
        for i in range(n_gangs)]
    for fut in futs:
        fut.result(timeout_s)
    placed = 0
    while SYSTEM_CLOCK.monotonic() - t0 < timeout_s:
        jobs = client.call(address, CONTROLLER_KEY, "list_jobs").result(60)
        placed = sum(1 for j in jobs if j["task_counts"].get("assigned", 0) == 4 * slices)
        if placed >= n_gangs:
            break
        SYSTEM_CLOCK.sleep(0.02)
    elapsed = SYSTEM_CLOCK.monotonic() - t0
    cpu = _thread_cpu_s(_CONTROLLER_THREAD) - cpu0
    pre = "multislice_" if slices > 1 else ""
    return {f"{pre}gangs_per_s_controller": round(placed / elapsed, 1),
            f"{pre}controller_cpu_ms_per_gang": round(1000 * cpu / max(placed, 1), 3),
            f"{pre}controller_gangs": n_gangs, f"{pre}controller_gangs_placed": placed,
            f"{pre}controller_place_s": round(elapsed, 3)}

