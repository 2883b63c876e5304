"""Simulated hosts for bench/fleet.py: N workers in one process, speaking the real protocol.

    python -m bench._fleet_hosts CONTROLLER_ADDRESS FIRST COUNT SECONDS

Each host has its own DEALER to the controller (its own TCP connection, as a real worker) and
sends what a real worker sends: `join` with the cluster token, then, with the credential it
gets back (its own), `register_worker` and one `report`
every `interval_s` the controller's last answer asked for (1-3 s), and one at once when an
attempt starts or ends (a worker holds no registry name, so it sends no renewals). The hosts
of one process share one ROUTER for the controller's `start_attempt` calls, addressed by
actor key, as the actors of one node do. An attempt "runs" for RUN_S and is reported done at
once (as a real worker's flush does). The IRIS/1 frames are built by iris.wire.messages.
What a report carries is a real worker's (worker/actor.py `_report`): the log-shipping stats
in every report, a usage sample per running attempt, and with an attempt's end its usage
totals and pickled result; IRIS_FLEET_EMPTY_STATS=1 sends the bare reports of before
(empty stats, no usage), for an A/B of what the stats cost the controller.
On exit prints one JSON line: reports sent, reregister answers (the controller forgot the
host: a false loss), errors, attempts run.
"""

from __future__ import annotations

import heapq
import json
import os
import pickle
import random
import signal
import sys
import time

import zmq

from iris.actors.keys import CONTROLLER_KEY, worker_key
from iris.base.errors import OverloadedError
from iris.controller.main import raise_open_files
from iris.wire import messages, remote_errors
from iris.worker.actor import report_interval
from iris.worker.report_route import CONTROLLER_IDLE_S

RUN_S = 0.05
# A worker's calls to the controller time out after 5 s (worker/actor.py `_call`), and it
# makes one at a time (its actor thread waits for the answer).
CALL_S = 5.0
ATTRS = {"cpu": "8", "memory": str(32 << 30), "region": "local"}
EMPTY_STATS = os.environ.get("IRIS_FLEET_EMPTY_STATS") == "1"
RESULT = pickle.dumps(None)  # what a task that returns nothing sends back


def report_args(host: Host) -> tuple:
    """report(worker_id, updates, stats, held[, usage]) as a real worker sends it."""
    held = sorted(host.running)
    if EMPTY_STATS:
        return host.worker_id, host.updates, {}, held
    stats = {"log_shipping": {"max_flush_lag_s": round(random.random() * 0.2, 3),
                              "dropped_lines": 0}}
    now = time.time()
    usage = [{"attempt_id": a, "at": now, "cpu_s": 0.01, "rss_bytes": 48 << 20,
              "memory_bytes": 64 << 20} for a in held]
    return host.worker_id, host.updates, stats, held, *([usage] if usage else [])


def exited(attempt: str) -> dict:
    """A real worker's "exited" update (worker/actor.py `_wire`): code, result, totals."""
    if EMPTY_STATS:
        return {"attempt_id": attempt, "status": "exited", "exit_code": 0}
    return {"attempt_id": attempt, "status": "exited", "exit_code": 0, "result": RESULT,
            "usage": {"cpu_s": 0.04, "peak_rss_bytes": 48 << 20,
                      "peak_memory_bytes": 64 << 20}}


class Host:
    __slots__ = ("worker_id", "sock", "registered", "next_beat", "updates", "sent", "running",
                 "pending", "ends", "interval", "hold_until", "sent_at", "credential",
                 "front", "front_sock", "front_at", "via_front", "ctl_used")

    def __init__(self, worker_id: str, sock: zmq.Socket, first_beat: float):
        self.worker_id, self.sock = worker_id, sock
        self.registered, self.next_beat = False, first_beat
        self.updates: list[dict] = []
        # The updates the call in flight carries: only those can be acknowledged by its
        # answer (an attempt may end while its "running" report is on the way: acking by
        # attempt id alone dropped the exit, and the job stayed running forever).
        self.sent: list[dict] = []
        self.running: dict[str, float] = {}  # attempt id -> when it ends
        self.pending: dict[int, str] = {}  # call id -> method
        self.interval = 1.0  # as the controller asks in each report's answer
        self.hold_until = 0.0  # told to come back later (admission control), as a worker is
        self.sent_at = 0.0  # when the call in flight (at most one, as a worker) was sent
        self.credential: bytes | None = None  # its own, from `join` (controller/credentials)
        # The report front the controller named (controller/report_fronts.py), its DEALER,
        # and whether the call in flight went there (a failure there: back to the controller).
        self.front: str | None = None
        self.front_sock: zmq.Socket | None = None
        self.front_at: str | None = None  # where front_sock is connected
        self.via_front = False
        self.ctl_used = 0.0  # its last call to the controller (idle: closed, as a worker)


def main() -> None:
    address, first, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4])
    # No token: a controller from before roles (bench.fleet --controller-root, for "before").
    token = bytes.fromhex(os.environ.get("IRIS_CLUSTER_TOKEN", "")) or None
    raise_open_files()  # a socket per host, as the controller needs one per worker
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 2 * count + 64)  # a DEALER to the controller, one to a front
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    me = f"tcp://127.0.0.1:{port}"
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    now = time.monotonic()
    hosts, by_sock, by_key = [], {}, {}
    for i in range(first, first + count):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        host = Host(f"sim-{i:05d}", sock, now + random.random())
        hosts.append(host)
        by_sock[sock] = host
        by_key[worker_key(host.worker_id)] = host
        poller.register(sock, zmq.POLLIN)
    stats = {"reports": 0, "reregister": 0, "errors": 0, "attempts": 0, "front_failures": 0,
             "via_front": 0}
    call_ids = iter(range(1, 1 << 62))

    def call(host: Host, actor: str, method: str, args: tuple) -> None:
        cid = next(call_ids)
        host.pending = {cid: method}  # one at a time; a reply after CALL_S is dropped
        host.sent_at = time.monotonic()
        auth = token if method == "join" else (host.credential or token)
        host.via_front = method == "report" and host.front is not None
        if host.via_front:
            sock = _front_sock(host, ctx, poller, by_sock)
            if host.sock is not None and host.sent_at - host.ctl_used > CONTROLLER_IDLE_S:
                poller.unregister(host.sock)  # as a worker lets go of an idle connection
                del by_sock[host.sock]
                host.sock.close(0)
                host.sock = None
        else:
            if host.sock is None:
                host.sock = ctx.socket(zmq.DEALER)
                host.sock.setsockopt(zmq.LINGER, 0)
                host.sock.connect(address)
                by_sock[host.sock] = host
                poller.register(host.sock, zmq.POLLIN)
            sock, host.ctl_used = host.sock, host.sent_at
        sock.send_multipart(messages.encode_call(cid, actor, method, int(CALL_S * 1000),
                                                 args, {}, auth=auth), copy=False)

    def beat(host: Host) -> None:
        if host.pending and time.monotonic() - host.sent_at < CALL_S:
            return  # a worker waits for its call's answer (or its timeout) before the next
        if host.pending and host.via_front:  # its front did not answer: the controller next
            host.front, host.pending = None, {}
            stats["front_failures"] += 1
            stats["front_timeout"] = stats.get("front_timeout", 0) + 1
        if not host.registered:
            if time.monotonic() < host.hold_until:
                return
            if host.credential is None and token is not None:
                call(host, CONTROLLER_KEY, "join", (host.worker_id,))
                return
            host.sent = list(host.updates)
            call(host, CONTROLLER_KEY, "register_worker",
                 (host.worker_id, me, ATTRS, sorted(host.running), host.updates))
        else:
            host.sent = list(host.updates)
            call(host, CONTROLLER_KEY, "report", report_args(host))
            stats["reports"] += 1
            stats["via_front"] += host.via_front

    end = time.monotonic() + seconds
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))  # print the figures, then go
    due = [(h.next_beat, i, h) for i, h in enumerate(hosts)]  # a heap: one beat per host
    heapq.heapify(due)
    seq = len(hosts)
    while True:
        now = time.monotonic()
        if now >= end or stop:
            break
        wait_ms = max(0, min(20, int((due[0][0] - now) * 1000))) if due else 20
        for sock, _ in poller.poll(timeout=wait_ms):
            if sock is router:
                if _on_command(router, by_key, now, stats):
                    seq += 1
                    heapq.heappush(due, (now + RUN_S, seq, None))  # an attempt ends then
                continue
            host = by_sock[sock]
            if _on_reply(host, sock, stats) and host.updates:  # more to say: at once
                beat(host)
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, host = heapq.heappop(due)
            if host is None:  # attempts ended: their hosts report at once
                for h in _finish(hosts_running, now):
                    seq += 1
                    beat(h)
                continue
            seq += 1
            heapq.heappush(due, (now + host.interval, seq, host))
            beat(host)
    print(json.dumps(stats), flush=True)
    ctx.destroy(linger=0)


def _front_sock(host: Host, ctx: zmq.Context, poller: zmq.Poller, by_sock: dict) -> zmq.Socket:
    """The host's DEALER to its report front, connected when first needed (or moved)."""
    if host.front_sock is not None and host.front_at != host.front:
        poller.unregister(host.front_sock)
        del by_sock[host.front_sock]
        host.front_sock.close(0)
        host.front_sock = None
    if host.front_sock is None:
        host.front_sock = ctx.socket(zmq.DEALER)
        host.front_sock.setsockopt(zmq.LINGER, 0)
        host.front_sock.connect(host.front)
        host.front_at = host.front
        by_sock[host.front_sock] = host
        poller.register(host.front_sock, zmq.POLLIN)
    return host.front_sock


def _on_reply(host: Host, sock: zmq.Socket, stats: dict) -> bool:
    """Handle one reply; True if it answered the host's call in flight."""
    frames = sock.recv_multipart()
    msg = messages.decode(frames[0], frames[1:])
    method = host.pending.pop(msg[2], None)
    if method is None:
        return False  # answered after the host gave up on it
    if msg[1] == messages.ERROR and host.via_front:  # as a worker: the controller next
        stats["front_failures"] += 1
        stats[f"front_{msg[3]}"] = stats.get(f"front_{msg[3]}", 0) + 1  # why, by code
        host.front = None
    elif msg[1] == messages.ERROR:
        stats["errors"] += 1
        if msg[3] == messages.E_PERMISSION:  # credential revoked (or lost): join again
            host.credential, host.registered = None, False
        elif method in ("register_worker", "join"):
            host.registered = False
            exc = remote_errors.error_from(msg[3], msg[4], msg[5], actor="", method=method,
                                           address="")
            if isinstance(exc, OverloadedError):  # the worker's own back-off (worker/actor.py)
                host.hold_until = time.monotonic() + exc.retry_after_s
    elif method == "join":
        host.credential = bytes(msg[4]["credential"])
        return False  # registers at its next beat (a second later at most), as a worker
    elif method == "register_worker":
        host.registered = True
        host.updates = [u for u in host.updates if not any(u is v for v in host.sent)]
    elif method == "report":
        host.interval = report_interval(msg[4].get("interval_s"))
        if msg[4].get("reports_to") is not None:  # a controller with report fronts
            host.front = msg[4]["reports_to"] or None
        if msg[4].get("reregister"):
            stats["reregister"] += 1
            host.registered = False
        else:
            acked = set(msg[4].get("acked", ()))
            host.updates = [u for u in host.updates if u["attempt_id"] not in acked
                            or not any(u is v for v in host.sent)]
    return True


hosts_running: set = set()  # hosts with attempts, for _finish


def _finish(running: set, now: float) -> list:
    done = []
    for host in list(running):
        for attempt, ends in list(host.running.items()):
            if ends <= now:
                del host.running[attempt]
                host.updates.append(exited(attempt))
                done.append(host)
        if not host.running:
            running.discard(host)
    return done


def _on_command(router: zmq.Socket, by_key: dict, now: float, stats: dict) -> bool:
    frames = router.recv_multipart()
    msg = messages.decode(frames[1], frames[2:])
    if msg[1] == messages.PING:  # the controller asks whether a slow answer is still coming
        router.send_multipart([frames[0], *messages.encode_pong(msg[2])])
        return False
    if msg[1] not in (messages.CALL, messages.CAST):
        return False
    call = messages.call_from(msg, frames[2:])
    host = by_key.get(call.actor)
    args, _ = messages.call_arguments(call)
    if host is not None and call.method == "start_attempt":
        launch = args[0]
        host.running[launch["attempt_id"]] = now + RUN_S
        host.updates.append({"attempt_id": launch["attempt_id"], "status": "running"})
        hosts_running.add(host)
        stats["attempts"] += 1
    if not call.oneway:
        router.send_multipart([frames[0], *messages.encode_reply(call.call_id, True)])
    return host is not None and call.method == "start_attempt"


if __name__ == "__main__":
    main()
