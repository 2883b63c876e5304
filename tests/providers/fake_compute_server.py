"""A fake Compute Engine v1 REST server for tests: instances and zone operations, on 127.0.0.1.

Not an emulator: what `iris cluster` asks of Compute Engine, in the shapes the real
google-cloud-compute client sends and accepts (shared/recipes.md §2): instances insert,
get, list, delete and reset; zone operations get and wait; getSerialPortOutput. Errors as
Google sends them (404 / 409 with `{"error": {...}}`). Instances can be made real: the
`on_insert`, `on_delete` and `on_reset` hooks run (off the server's loop) when an operation
finishes, e.g. to start on this machine the process the VM's startup script would start.
Runs aiohttp on its own loop in a background thread; `requests` logs what the client sent.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.providers.fake_http import FakeHttpServer

_BASE = "/compute/v1/projects/{project}/zones/{zone}"
_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 500: "INTERNAL"}
Hook = Callable[[dict], None]


@dataclass
class FakeComputeServer(FakeHttpServer):
    """Start with `with FakeComputeServer() as s:`; point the client at `s.url`."""

    on_insert: Hook | None = None  # called with the instance once its insert is DONE
    on_delete: Hook | None = None  # ... once its delete is DONE (it is gone)
    on_reset: Hook | None = None  # ... once its reset is DONE
    url: str = ""
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    _instances: dict[str, dict] = field(default_factory=dict)  # "zone/name" -> instance
    _serial: dict[str, str] = field(default_factory=dict)
    _ops: dict[str, dict] = field(default_factory=dict)
    _stocked_out: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    # --- test controls -------------------------------------------------------------------
    def instances(self) -> list[dict]:
        """Every instance in every zone (copies): the inventory a test checks is empty."""
        with self._lock:
            return [dict(self._instances[k]) for k in sorted(self._instances)]

    def stock_out(self, zone: str, on: bool = True) -> None:
        """Inserts in `zone` are accepted, then their operation ends DONE with GCE's
        ZONE_RESOURCE_POOL_EXHAUSTED error, and no instance is left."""
        with self._lock:
            (self._stocked_out.add if on else self._stocked_out.discard)(zone)

    def append_serial(self, name: str, text: str) -> None:
        """What the instance `name` writes on its serial console (boot, startup script)."""
        with self._lock:
            self._serial[name] = self._serial.get(name, "") + text

    # --- lifecycle -----------------------------------------------------------------------
    _name = "fake Compute Engine server"

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._log])
        r = app.router
        r.add_post(_BASE + "/instances", self._insert)
        r.add_get(_BASE + "/instances", self._list)
        r.add_get(_BASE + "/instances/{name}", self._get)
        r.add_delete(_BASE + "/instances/{name}", self._delete)
        r.add_post(_BASE + "/instances/{name}/reset", self._reset)
        r.add_get(_BASE + "/instances/{name}/serialPort", self._serial_port)
        r.add_get(_BASE + "/operations/{op}", self._get_op)
        r.add_post(_BASE + "/operations/{op}/wait", self._get_op)
        return app

    @web.middleware
    async def _log(self, request: web.Request, handler):
        with self._lock:
            self.requests.append((request.method, request.path))
        return await handler(request)

    # --- handlers ------------------------------------------------------------------------
    async def _insert(self, request: web.Request) -> web.Response:
        body = await request.json()
        zone, name = request.match_info["zone"], body.get("name", "")
        if not name:
            return _error(400, "Invalid value for field 'resource.name': ''")
        key = f"{zone}/{name}"
        with self._lock:
            if key in self._instances:
                return _error(409, f"The resource '{_link(request, name)}' already exists")
            if zone in self._stocked_out:
                return web.json_response(self._failed_op(request, name, zone))
            n = next(self._ids)
            self._instances[key] = {
                **body, "kind": "compute#instance", "id": str(1000 + n), "status": "RUNNING",
                "zone": _zone_link(request), "selfLink": _link(request, name),
                "networkInterfaces": [{**nic, "networkIP": f"10.128.0.{n % 250 + 2}"}
                                      for nic in body.get("networkInterfaces") or [{}]],
            }
            self._serial[name] = f"Booting {name}\n"
            instance = dict(self._instances[key])
        return await self._operation(request, "insert", name, self.on_insert, instance)

    async def _delete(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        with self._lock:
            instance = self._instances.pop(f"{request.match_info['zone']}/{name}", None)
            self._serial.pop(name, None)
        if instance is None:
            return _error(404, f"The resource '{_link(request, name)}' was not found")
        return await self._operation(request, "delete", name, self.on_delete, instance)

    async def _reset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        with self._lock:
            instance = self._instances.get(f"{request.match_info['zone']}/{name}")
        if instance is None:
            return _error(404, f"The resource '{_link(request, name)}' was not found")
        return await self._operation(request, "reset", name, self.on_reset, dict(instance))

    async def _get(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        with self._lock:
            instance = self._instances.get(f"{request.match_info['zone']}/{name}")
        if instance is None:
            return _error(404, f"The resource '{_link(request, name)}' was not found")
        return web.json_response(instance)

    async def _list(self, request: web.Request) -> web.Response:
        prefix = f"{request.match_info['zone']}/"
        with self._lock:
            items = [self._instances[k] for k in sorted(self._instances) if k.startswith(prefix)]
        return web.json_response({"kind": "compute#instanceList", "items": items})

    async def _serial_port(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        start = int(request.query.get("start") or 0)
        with self._lock:
            text = self._serial.get(name)
        if text is None:
            return _error(404, f"The resource '{_link(request, name)}' was not found")
        return web.json_response({"kind": "compute#serialPortOutput", "contents": text[start:],
                                  "start": str(start), "next": str(len(text))})

    async def _get_op(self, request: web.Request) -> web.Response:
        with self._lock:
            op = self._ops.get(request.match_info["op"])
            if op is not None:  # RUNNING when inserted: a client must poll or wait once
                op.update(status="DONE", progress=100)
                op = dict(op)
        if op is None:
            return _error(404, f"operation {request.match_info['op']} not found")
        return web.json_response(op)

    def _failed_op(self, request: web.Request, name: str, zone: str) -> dict:
        """An insert operation that ended in a stock-out (lock held)."""
        op_name = f"operation-{next(self._ids)}"
        op = {"kind": "compute#operation", "id": op_name[10:], "name": op_name,
              "zone": _zone_link(request), "operationType": "insert", "status": "DONE",
              "progress": 100, "targetLink": _link(request, name),
              "httpErrorStatusCode": 503, "httpErrorMessage": "SERVICE UNAVAILABLE",
              "error": _stock_out_error(zone)}
        self._ops[op_name] = op
        return dict(op)

    async def _operation(self, request: web.Request, kind: str, name: str,
                         hook: Hook | None, instance: dict) -> web.Response:
        """Run the hook (it may start a process: off the loop), then answer the operation,
        RUNNING until its first get or wait: the client must follow it, as on GCP."""
        if hook is not None:
            await asyncio.get_running_loop().run_in_executor(None, hook, instance)
        op_name = f"operation-{next(self._ids)}"
        op = {"kind": "compute#operation", "id": op_name[10:], "name": op_name,
              "zone": _zone_link(request), "operationType": kind, "status": "RUNNING",
              "progress": 0, "targetLink": _link(request, name),
              "selfLink": f"{_zone_link(request)}/operations/{op_name}"}
        with self._lock:
            self._ops[op_name] = op
            return web.json_response(dict(op))


def _stock_out_error(zone: str) -> dict:
    return {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": (
        f"The zone 'projects/p/zones/{zone}' does not have enough resources available to "
        "fulfill the request. Try a different zone, or try again later.")}]}


def _zone_link(request: web.Request) -> str:
    m = request.match_info
    return f"{request.url.origin()}/compute/v1/projects/{m['project']}/zones/{m['zone']}"


def _link(request: web.Request, name: str) -> str:
    return f"{_zone_link(request)}/instances/{name}"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"code": status, "message": message,
                                        "status": _STATUS.get(status, "UNKNOWN"),
                                        "errors": [{"message": message, "reason": "x"}]}},
                             status=status)


__all__: list[Any] = ["FakeComputeServer"]
