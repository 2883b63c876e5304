"""`/proxy/JOB/TASK/PORT/...`: the dashboard passes HTTP and WebSocket requests on to a task's
named port (TensorBoard, an inference server, a debugger), so a browser that reaches the
dashboard reaches them. Not the routes' access rules (app.py) nor where ports are (the
controller's inspector, `task_url`).

JOB is the job's id, percent-encoded as one segment (`%2Falice%2Ftrain`, what the page
links to) or as plain segments (`alice/train`); TASK is the task's index; PORT the name
the job asked for. Where a port is is asked once and kept for TARGET_TTL_S.

What a user sees instead of a hang: nothing listening there (connection refused) is a 502
page naming the task and port at once; a server that accepts but does not answer within
READ_TIMEOUT_S is a 504; an unknown job, task or port name is a 404 naming it; a task that
runs nothing now is a 503 saying its state.

Isolation: a proxied page is served with `Content-Security-Policy: sandbox ...` (no
allow-same-origin), so its scripts run in an origin of their own and cannot read the
dashboard's token or call its API as the viewer. Its own requests to relative paths are
then cross-origin ("null"); they are answered with `Access-Control-Allow-Origin: null`
(no credentials). The dashboard's token never reaches the task: it is taken out of the
query string and the headers before the request goes on.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from iris.base.errors import InvalidRequestError, IrisError, NotFoundError

TARGET_TTL_S = 2.0  # a restarted task's new port is used within this
_TARGETS_KEPT = 1024
CONNECT_TIMEOUT_S = 5.0  # refused is immediate; a host that drops packets waits this
READ_TIMEOUT_S = 60.0  # a slow page, not a dead one
_SMALL = 1 << 20  # bodies up to this are read whole (fewer writes, lower latency)
_PORT = re.compile(r"[a-z][a-z0-9_]{0,31}")
TOKEN_COOKIE = "iris_proxy_token"  # app.py: the token a first visit gave, for the subpaths
SANDBOX = ("sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads "
           "allow-popups-to-escape-sandbox")
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
_NOT_FORWARDED = _HOP | {"authorization", "cookie"}
# aiohttp 3.10+ tells a connect timeout from a read timeout; older ones: both are 504s.
_CONNECT_TIMED_OUT = getattr(aiohttp, "ConnectionTimeoutError", ())


@dataclass(frozen=True)
class Where:
    job_id: str
    task: int
    port_name: str
    rest: str  # the path after the port, with its leading "/"


def parse(raw_path: str) -> Where:
    """/proxy/JOB/TASK/PORT/rest -> Where (see the module docstring for JOB's two forms)."""
    segs = raw_path.split("?", 1)[0].removeprefix("/proxy/").split("/")
    first = unquote(segs[0])
    if first.startswith("/"):
        if len(segs) < 3:
            raise NotFoundError("proxy path: expected /proxy/JOB/TASK/PORT/...")
        return _where(first, segs[1], segs[2], segs[3:])
    for i in range(1, len(segs) - 1):
        if segs[i].isdigit() and _PORT.fullmatch(segs[i + 1]):
            return _where("/" + "/".join(unquote(s) for s in segs[:i]), segs[i], segs[i + 1],
                          segs[i + 2:])
    raise NotFoundError("proxy path: expected /proxy/JOB/TASK/PORT/... (e.g. "
                        "/proxy/alice/train/0/http/)")


def _where(job_id: str, task: str, port: str, rest: list[str]) -> Where:
    if not task.isdigit():
        raise NotFoundError(f"proxy path: task {task!r} is not a task index")
    return Where(job_id, int(task), unquote(port), "/" + "/".join(rest))


class Proxy:
    """One per dashboard: a pooled HTTP client and the targets asked recently."""

    def __init__(self, locate):
        self._locate = locate  # async (job_id, task, port name) -> {"host", "port", ...}
        self._targets: OrderedDict[tuple, tuple[float, dict]] = OrderedDict()
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=30),
                timeout=aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S,
                                              sock_read=READ_TIMEOUT_S),
                auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def _target(self, where: Where) -> dict:
        key = (where.job_id, where.task, where.port_name)
        now = asyncio.get_running_loop().time()
        kept = self._targets.get(key)
        if kept is not None and now - kept[0] < TARGET_TTL_S:
            return kept[1]
        target = await self._locate(where.job_id, where.task, where.port_name)
        self._targets[key] = (now, target)
        self._targets.move_to_end(key)
        while len(self._targets) > _TARGETS_KEPT:
            self._targets.popitem(last=False)
        return target

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            where = parse(request.raw_path)
            target = await self._target(where)
        except NotFoundError as exc:
            return page(404, "Not found", str(exc))
        except InvalidRequestError as exc:
            return page(404 if exc.field == "port" and "asked for no port" in str(exc)
                        else 503, "Not serving", str(exc))
        except IrisError as exc:
            return page(503, "Controller unavailable", f"the controller did not answer: {exc}")
        url = f"http://{_host(target['host'])}:{target['port']}{where.rest}"
        query = [(k, v) for k, v in request.query.items() if k != "token"]
        what = (f"port {where.port_name!r} of task {where.task} of {where.job_id} "
                f"({target['host']}:{target['port']})")
        try:
            if request.headers.get("Upgrade", "").lower() == "websocket":
                return await self._websocket(request, url, query)
            return await self._http(request, url, query)
        except aiohttp.ClientConnectorError as exc:
            return page(502, "Nothing listens there",
                        f"nothing accepted a connection on {what}: the task's server is not "
                        f"up yet, or it exited ({exc.os_error or exc})")
        except _CONNECT_TIMED_OUT:
            return page(502, "Nothing answers there",
                        f"{what} did not accept a connection within {CONNECT_TIMEOUT_S:g} s "
                        "(its host is unreachable from the dashboard, or drops packets)")
        except (TimeoutError, aiohttp.ServerTimeoutError):
            return page(504, "No answer", f"{what} accepted the connection but did not answer "
                        f"within {READ_TIMEOUT_S:g} s")
        except aiohttp.ClientError as exc:
            return page(502, "Bad answer", f"{what} broke the connection: {exc}")

    async def _http(self, request: web.Request, url: str, query: list) -> web.StreamResponse:
        headers = _forwarded(request.headers)
        body = request.content if request.body_exists else None  # streamed, never held whole
        async with self._client().request(request.method, url, params=query, headers=headers,
                                          data=body, allow_redirects=False) as upstream:
            out_headers = {k: v for k, v in upstream.headers.items()
                           if k.lower() not in _HOP}
            out_headers.update(_isolation(request))
            if upstream.content_length is not None and upstream.content_length <= _SMALL:
                return web.Response(status=upstream.status, headers=out_headers,
                                    body=await upstream.read())
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:  # the browser went away: nothing left to tell it
                pass
            return response

    async def _websocket(self, request: web.Request, url: str, query: list
                         ) -> web.StreamResponse:
        protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "")
                     .split(",") if p.strip()]
        async with self._client().ws_connect(url, params=query, protocols=protocols,
                                             headers=_forwarded(request.headers, ws=True)
                                             ) as upstream:
            downstream = web.WebSocketResponse(protocols=protocols)
            await downstream.prepare(request)
            await asyncio.gather(_pump(downstream, upstream), _pump(upstream, downstream))
            return downstream


async def _pump(source: Any, sink: Any) -> None:
    """Copy messages one way until either side closes; then close the other."""
    try:
        async for msg in source:
            if msg.type == aiohttp.WSMsgType.TEXT:
                await sink.send_str(msg.data)
            elif msg.type == aiohttp.WSMsgType.BINARY:
                await sink.send_bytes(msg.data)
            else:
                break
    except (aiohttp.ClientError, ConnectionError):
        pass
    finally:
        if not sink.closed:
            await sink.close()


def _forwarded(headers: Any, ws: bool = False) -> dict:
    skip = _NOT_FORWARDED | ({"sec-websocket-key", "sec-websocket-version",
                              "sec-websocket-extensions", "sec-websocket-protocol"}
                             if ws else set())
    return {k: v for k, v in headers.items() if k.lower() not in skip}


def _isolation(request: web.Request) -> dict:
    out = {"Content-Security-Policy": SANDBOX}
    if request.headers.get("Origin") == "null":  # the sandboxed page's own requests
        out["Access-Control-Allow-Origin"] = "null"
    return out


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def page(status: int, title: str, message: str) -> web.Response:
    """A page a person reads in the browser (these are navigations, not API calls)."""
    body = (f"<!doctype html><html><head><meta charset='utf-8'><title>{status} "
            f"{html.escape(title)}</title></head><body style='font:15px system-ui;margin:2em'>"
            f"<h1 id='proxy-error'>{status} {html.escape(title)}</h1>"
            f"<p id='proxy-message'>{html.escape(message)}</p>"
            "<p><a href='/'>Back to the Iris dashboard</a></p></body></html>")
    return web.Response(status=status, text=body, content_type="text/html")
