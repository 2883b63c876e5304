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

`remote=True` (issue 32 item 4): the three Region actors each in a process of their own
(`regions/remote.py` `serve_region`), named to the controller by
`ControllerConfig.region_actors`: every inventory push and gang frame is a call over TCP.
Then region_cpu_ms_per_gang: the CPU of the three region processes, per gang placed.
`profile`: a path; the Controller actor's thread runs under cProfile from the first submit
to the last assignment, and its stats are written there.
"""

from __future__ import annotations

import cProfile
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from iris.actors import Node, NodeConfig, tokens
from iris.actors.keys import CONTROLLER_KEY
from iris.base.clock import SYSTEM_CLOCK
from iris.base.resources import Resources
from iris.controller.credentials import controller_token, load_secret
from iris.controller.main import host_controller
from iris.controller.service import ControllerConfig

REGIONS = ("us-east", "us-central", "eu-west")
_GB = 10**9
_ACCEL = "v5litepod-16"
_CONTROLLER_THREAD = "iris-actor-/iris/controller"  # the Controller actor's thread
_ROOT = Path(__file__).resolve().parents[1]
# A Region actor in a process of its own, for a controller that presents REGION_TOKEN.
_REGION_PROC = """
import os, sys
from iris.actors import Node, NodeConfig
from iris.controller.regions.remote import serve_region
node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
serve_region(node, sys.argv[1], bytes.fromhex(os.environ["REGION_TOKEN"]))
print("READY", node.address, flush=True)
sys.stdin.read()
"""


def bench_gangs_controller(n_slices: int, timeout_s: float = 300.0, slices: int = 1,
                           remote: bool = False, profile: Path | None = None) -> dict:
    # Refused start_attempt calls are logged as warnings, one per task: not the figure.
    logging.getLogger("iris.controller.actor").setLevel(logging.ERROR)
    logging.getLogger("iris.controller.regions.region").setLevel(logging.ERROR)
    per_region = max(1, n_slices // len(REGIONS))
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp) / "controller"
        procs = _region_procs(controller_token(load_secret(state_dir))) if remote else {}
        server = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
        client = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
        try:
            # No heartbeats are sent: the hosts must not be declared lost mid-run.
            # (region_actors only when set: a revision before it still runs the in-process case)
            remote_kw = {"region_actors": {r: a for r, (_, a) in procs.items()}} if procs else {}
            host_controller(server, ControllerConfig(state_dir=state_dir,
                                                     worker_dead_after_s=3600.0, **remote_kw))
            token = tokens.load_or_create(state_dir / tokens.CLUSTER_TOKEN_FILE)
            _register(client, server.address, token, per_region)
            pids = [proc.pid for proc, _ in procs.values()]
            return _place(client, server, per_region * len(REGIONS) // slices,
                          timeout_s, slices, pids, profile)
        finally:
            client.stop()
            server.stop()
            for proc, _ in procs.values():
                proc.kill()
                proc.wait(30)


def _region_procs(token: bytes) -> dict[str, tuple[subprocess.Popen, str]]:
    """One process per region serving its Region actor: region -> (process, address)."""
    out = {}
    for region in REGIONS:
        proc = subprocess.Popen([sys.executable, "-c", _REGION_PROC, region],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(_ROOT),
                                     "REGION_TOKEN": token.hex()})
        out[region] = (proc, proc.stdout.readline().split()[1])
    return out


def _proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    utime, stime = fields.rsplit(")", 1)[1].split()[11:13]
    return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")


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


def _place(client: Node, server: Node, n_gangs: int, timeout_s: float, slices: int,
           pids: list[int], profile: Path | None) -> dict:
    address = server.address
    resources = Resources(tpu=_ACCEL, cpu=1, count=slices).to_dict()
    # CPU time of the thread, not wall time: on a loaded machine a function's wall time is
    # mostly waiting for a core.
    prof = cProfile.Profile(time.thread_time) if profile else None
    if prof is not None:  # on the Controller actor's own thread (cProfile is per thread)
        started = threading.Event()
        server.post_to(CONTROLLER_KEY, lambda: (prof.enable(), started.set()))
        started.wait(30)
    cpu0 = _thread_cpu_s(_CONTROLLER_THREAD)
    region_cpu0 = sum(_proc_cpu_s(p) for p in pids)
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
    region_cpu = sum(_proc_cpu_s(p) for p in pids) - region_cpu0
    if prof is not None:
        stopped = threading.Event()
        server.post_to(CONTROLLER_KEY, lambda: (prof.disable(), stopped.set()))
        stopped.wait(30)
        prof.dump_stats(str(profile))
    pre = "multislice_" if slices > 1 else ""
    extra = {f"{pre}region_cpu_ms_per_gang": round(1000 * region_cpu / max(placed, 1), 3)} \
        if pids else {}
    return {**extra, f"{pre}gangs_per_s_controller": round(placed / elapsed, 1),
            f"{pre}controller_cpu_ms_per_gang": round(1000 * cpu / max(placed, 1), 3),
            f"{pre}controller_gangs": n_gangs, f"{pre}controller_gangs_placed": placed,
            f"{pre}controller_place_s": round(elapsed, 3)}

