"""A fake Cloud TPU v2 REST server for tests: the tpu_v2 REST shapes, on 127.0.0.1 port 0.

Not a full emulator: nodes, long-running operations, pagination and the errors Iris must
handle (409 on a duplicate id, a create LRO that fails with RESOURCE_EXHAUSTED in a
stocked-out zone, 429 for quota, PREEMPTED nodes). Shapes follow shared/recipes.md §2.
Runs aiohttp on its own loop in a background thread; tests steer it through methods that
take a lock, read `requests` to see exactly what the client sent, and `wait_for_request`
instead of polling for a call made from another thread.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from iris.base.errors import InvalidRequestError
from iris.base.resources import tpu_shape
from tests.providers.fake_http import FakeHttpServer

_NODE_TYPE = "type.googleapis.com/google.cloud.tpu.v2.Node"
_EMPTY_TYPE = "type.googleapis.com/google.protobuf.Empty"
_META_TYPE = "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
_STATUS_NAMES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
                 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL"}
_RESOURCE_EXHAUSTED = 8  # google.rpc.Code
# Real GCP answers a create over quota at once: HTTP 429, status RESOURCE_EXHAUSTED, and
# "Quota limit '<metric>' has been exceeded. Limit: N in zone|region Z." (seen in the wild).
_QUOTA_METRIC = "TPUV4PodPerProjectPerZoneForTPUAPI"


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class _Operation:
    name: str
    verb: str
    target: str
    polls_left: int
    fail_with: str | None = None  # message of a RESOURCE_EXHAUSTED failure
    done: bool = False
    result: dict | None = None
    error: dict | None = None


@dataclass
class FakeTpuServer(FakeHttpServer):
    """Start with `with FakeTpuServer() as s:`; point the client at `s.url`."""

    polls_before_done: int = 1  # operation GETs answered "not done" before it completes
    max_page_size: int = 100  # cap on nodes per list page, so tests can force paging
    requests: list[LoggedRequest] = field(default_factory=list)
    url: str = ""
    _nodes: dict[str, dict] = field(default_factory=dict)
    _ops: dict[str, _Operation] = field(default_factory=dict)
    _stocked_out: set[str] = field(default_factory=set)
    _no_quota: set[str] = field(default_factory=set)
    _fail_next: list[int] = field(default_factory=list)
    _held: bool = False  # operations stay "not done" however often they are polled
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self._arrived = threading.Condition(self._lock)  # notified on every request logged

    # --- test controls -------------------------------------------------------------------
    def stock_out(self, zone: str, on: bool = True) -> None:
        """Creates in `zone` are accepted, then their operation fails RESOURCE_EXHAUSTED."""
        with self._lock:
            (self._stocked_out.add if on else self._stocked_out.discard)(zone)

    def exhaust_quota(self, zone: str, on: bool = True) -> None:
        """Creates in `zone` are refused at once with HTTP 429 RESOURCE_EXHAUSTED, worded
        as GCP words a quota refusal."""
        with self._lock:
            (self._no_quota.add if on else self._no_quota.discard)(zone)

    def hold_operations(self, on: bool = True) -> None:
        """While on, no operation finishes (a create stays in flight, its node CREATING);
        off: each finishes at its next poll once its `polls_before_done` are used up."""
        with self._lock:
            self._held = on

    def fail_next_request(self, status: int = 500) -> None:
        with self._lock:
            self._fail_next.append(status)

    def preempt(self, node_id: str) -> None:
        self.set_state(node_id, "PREEMPTED")

    def set_state(self, node_id: str, state: str) -> None:
        """Put a node in any tpu_v2 Node.State, as GCP would on its own (e.g. TERMINATED)."""
        with self._lock:
            for name, node in self._nodes.items():
                if name.endswith(f"/nodes/{node_id}"):
                    node["state"] = state
                    return
        raise KeyError(node_id)

    def node(self, node_id: str) -> dict | None:
        with self._lock:
            for name, node in self._nodes.items():
                if name.endswith(f"/nodes/{node_id}"):
                    return dict(node)
        return None

    def nodes(self) -> list[dict]:
        """Copies of every node in every zone, sorted by name."""
        with self._lock:
            return [dict(self._nodes[n]) for n in sorted(self._nodes)]

    def requests_for(self, method: str, fragment: str = "") -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == method and fragment in r.path]

    def wait_for_request(self, method: str, fragment: str = "", *, count: int = 1,
                         timeout: float = 60.0) -> LoggedRequest:
        """Block until `count` `method` requests whose path contains `fragment` have arrived
        (counting those already logged); the count-th. TimeoutError names what never came."""
        def matching() -> list[LoggedRequest]:
            return [r for r in self.requests if r.method == method and fragment in r.path]

        with self._arrived:
            if not self._arrived.wait_for(lambda: len(matching()) >= count, timeout):
                raise TimeoutError(f"fewer than {count} {method} requests for {fragment!r} "
                                   f"within {timeout} s")
            return matching()[count - 1]

    # --- lifecycle -----------------------------------------------------------------------
    _name = "fake TPU server"

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._log_middleware])
        base = "/v2/projects/{project}/locations/{zone}"
        app.router.add_post(base + "/nodes", self._create)
        app.router.add_get(base + "/nodes", self._list)
        app.router.add_get(base + "/nodes/{node}", self._get)
        app.router.add_delete(base + "/nodes/{node}", self._delete)
        app.router.add_get(base + "/operations/{op}", self._get_operation)
        return app

    # --- handlers ------------------------------------------------------------------------
    @web.middleware
    async def _log_middleware(self, request: web.Request, handler):
        body = await request.json() if request.can_read_body else None
        with self._lock:
            self.requests.append(LoggedRequest(request.method, request.path,
                                               dict(request.query), body))
            self._arrived.notify_all()
            status = self._fail_next.pop(0) if self._fail_next else None
        if status is not None:
            return _error(status, "injected failure")
        return await handler(request)

    async def _create(self, request: web.Request) -> web.Response:
        zone, body = request.match_info["zone"], await request.json()
        parent = _parent(request)
        name = f"{parent}/nodes/{request.query.get('nodeId', '')}"
        try:
            hosts = tpu_shape(body.get("acceleratorType", "")).hosts
        except InvalidRequestError as exc:
            return _error(400, str(exc))
        with self._lock:
            if zone in self._no_quota:
                return _error(429, f"Quota limit '{_QUOTA_METRIC}' has been exceeded. "
                                   f"Limit: 0 in zone {zone}.")
            if name in self._nodes:
                return _error(409, f"node {name} already exists")
            ips = [f"10.0.{next(self._ids) % 250}.{i + 2}" for i in range(hosts)]
            self._nodes[name] = {**body, "name": name, "state": "CREATING",
                                 "networkEndpoints": [{"ipAddress": ip, "port": 8470}
                                                      for ip in ips]}
            fail = f"There is no more capacity in the zone {zone}" \
                if zone in self._stocked_out else None
            op = self._new_op(parent, "create", name, fail)
            return web.json_response(_op_json(op))

    async def _delete(self, request: web.Request) -> web.Response:
        name = f"{_parent(request)}/nodes/{request.match_info['node']}"
        with self._lock:
            if name not in self._nodes:
                return _error(404, f"node {name} not found")
            self._nodes[name]["state"] = "DELETING"
            return web.json_response(_op_json(self._new_op(_parent(request), "delete", name)))

    async def _get(self, request: web.Request) -> web.Response:
        name = f"{_parent(request)}/nodes/{request.match_info['node']}"
        with self._lock:
            if name not in self._nodes:
                return _error(404, f"node {name} not found")
            return web.json_response(self._nodes[name])

    async def _list(self, request: web.Request) -> web.Response:
        parent = _parent(request) + "/nodes/"
        size = min(int(request.query.get("pageSize") or self.max_page_size), self.max_page_size)
        start = int(request.query.get("pageToken") or 0)
        with self._lock:
            names = sorted(n for n in self._nodes if n.startswith(parent))
            page = [self._nodes[n] for n in names[start:start + size]]
        reply: dict[str, Any] = {"nodes": page}
        if start + size < len(names):
            reply["nextPageToken"] = str(start + size)
        return web.json_response(reply)

    async def _get_operation(self, request: web.Request) -> web.Response:
        name = f"{_parent(request)}/operations/{request.match_info['op']}"
        with self._lock:
            op = self._ops.get(name)
            if op is None:
                return _error(404, f"operation {name} not found")
            if not op.done and not self._held:
                op.polls_left -= 1
                if op.polls_left <= 0:
                    self._finish(op)
            return web.json_response(_op_json(op))

    # --- operations (called with the lock held) ------------------------------------------
    def _new_op(self, parent: str, verb: str, target: str, fail: str | None = None) -> _Operation:
        op = _Operation(name=f"{parent}/operations/op-{next(self._ids)}", verb=verb,
                        target=target, polls_left=self.polls_before_done, fail_with=fail)
        self._ops[op.name] = op
        if op.polls_left <= 0 and not self._held:
            self._finish(op)
        return op

    def _finish(self, op: _Operation) -> None:
        op.done = True
        if op.fail_with is not None:
            self._nodes.pop(op.target, None)
            op.error = {"code": _RESOURCE_EXHAUSTED, "message": op.fail_with}
        elif op.verb == "create":
            node = self._nodes[op.target]
            if node["state"] == "CREATING":
                node["state"] = "READY"
            op.result = {"@type": _NODE_TYPE, **node}
        else:
            self._nodes.pop(op.target, None)
            op.result = {"@type": _EMPTY_TYPE}


def _parent(request: web.Request) -> str:
    return f"projects/{request.match_info['project']}/locations/{request.match_info['zone']}"


def _op_json(op: _Operation) -> dict:
    reply: dict[str, Any] = {
        "name": op.name, "done": op.done,
        "metadata": {"@type": _META_TYPE, "verb": op.verb, "target": op.target,
                     "apiVersion": "v2"},
    }
    if op.error is not None:
        reply["error"] = op.error
    elif op.result is not None:
        reply["response"] = op.result
    return reply


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"code": status, "message": message,
                   "status": _STATUS_NAMES.get(status, "UNKNOWN")}}, status=status)
