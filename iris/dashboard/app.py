"""The dashboard's HTTP surface on aiohttp.web: routes, access control, error replies.

Not the data (backend.py) and not the page's look (page.py). Every page is the one HTML shell
plus a JSON API the page (and anything else, e.g. the CLI) reads:

    GET  /api/jobs?state=running,pending&user=&prefix=&sort=submitted&order=desc&page=1&per_page=50
    GET  /api/job?id=/alice/train          (command, resources, durations, attempts timeline)
    GET  /api/job/logs?id=/alice/train&tail=200&task=0&stream=stderr&grep=RE
    GET  /api/job/logs/download?id=/alice/train&task=0    (text/plain, with timestamps)
    POST /api/job/kill  {"job_id": "/alice/train"}
    GET  /api/workers   /api/capacity   /api/actors?prefix=/   /api/scheduler   /api/history
    GET  /api/usage     (accelerator-hours per user over 7 days; budgets: `iris user budget`)
    GET  /api/figures?hours=24   (utilization, queue time by band, preemptions, fragmentation)
    GET  /metrics
    GET  /api/job/summary, /api/task/stack, /api/task/profile; * /proxy/JOB/TASK/PORT/...
         (inspect_api.py, proxy.py)

Times in the API are wall-clock epoch seconds (log lines also carry ISO-8601 `time`).

Access: with a token configured (required off loopback, see server.py) every request must
carry it, as `Authorization: Bearer T` (the page sends it) or `?token=T` on a GET (for a first
visit and for Prometheus). A kill also needs the `X-Iris-Dashboard` header, which a browser
never sends cross-site without a CORS preflight this server does not grant: another web page
cannot kill jobs through a loopback dashboard.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from iris.base.errors import (
    ActorCallError,
    InvalidRequestError,
    IrisError,
    NotFoundError,
    StorageError,
)
from iris.dashboard import inspect_api, metrics
from iris.dashboard.backend import MAX_LOG_TAIL, Backend
from iris.dashboard.page import PAGE_HTML
from iris.dashboard.proxy import TOKEN_COOKIE
from iris.dashboard.reads import JobQuery

_log = logging.getLogger(__name__)
_BACKEND = web.AppKey("backend", Backend)
_TOKEN = web.AppKey("token", str)
_WRITE_TOKEN = web.AppKey("write_token", str)
KILL_HEADER = "X-Iris-Dashboard"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(backend: Backend, token: str | None,
              write_token: str | None = None) -> web.Application:
    """`token`: needed by every request when set. `write_token`: needed by every write (a
    kill), on any address; it is `token` when one is set, else made at start and handed
    out only in the address the operator is shown."""
    app = web.Application(middlewares=[_errors, _access])
    app[_BACKEND] = backend
    app[_TOKEN] = token or ""
    app[_WRITE_TOKEN] = token or write_token or ""
    app.router.add_get("/", _page)
    app.router.add_get("/api/jobs", _jobs)
    app.router.add_get("/api/job", _job)
    app.router.add_get("/api/job/logs", _logs)
    app.router.add_get("/api/job/logs/download", _logs_download)
    app.router.add_get("/api/history", _simple("history_view"))
    app.router.add_post("/api/job/kill", _kill)
    app.router.add_get("/api/workers", _simple("workers"))
    app.router.add_get("/api/capacity", _simple("capacity"))
    app.router.add_get("/api/scheduler", _simple("scheduler"))
    app.router.add_get("/api/usage", _simple("usage"))
    app.router.add_get("/api/actors", _actors)
    app.router.add_get("/api/figures", _figures)
    app.router.add_get("/metrics", _metrics)
    inspect_api.add_routes(app, backend)
    return app


@web.middleware
async def _access(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[_TOKEN]
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not given and request.method == "GET":
            given = request.query.get("token", "")
        proxied = request.path.startswith("/proxy/")
        if not given and proxied:  # a proxied page's own paths: the cookie its visit got
            given = request.cookies.get(TOKEN_COOKIE, "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise _error(401, "unauthorized", "this dashboard needs its token: open it as "
                         "/?token=T or send 'Authorization: Bearer T'")
        if proxied and request.query.get("token"):
            raise _keep_proxy_token(request, token)
    return await handler(request)


def _keep_proxy_token(request: web.Request, token: str) -> web.HTTPException:
    """/proxy/...?token=T: the page's own links and scripts will not carry T, so it goes
    into a cookie for /proxy/ only (HttpOnly, SameSite=Strict), and the browser is sent to
    the same address without it (the task's server never sees the token)."""
    query = {k: v for k, v in request.query.items() if k != "token"}
    again = web.HTTPSeeOther(str(request.rel_url.with_query(query)))
    again.set_cookie(TOKEN_COOKIE, token, path="/proxy/", httponly=True, samesite="Strict")
    return again


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Iris errors become JSON replies a person can read; nothing else leaks a traceback."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except InvalidRequestError as exc:
        raise _error(400, "invalid_request", str(exc), exc.field) from exc
    except NotFoundError as exc:
        raise _error(404, "not_found", str(exc)) from exc
    except (ActorCallError, StorageError) as exc:
        raise _error(503, "unavailable", f"the controller did not answer: {exc}") from exc
    except IrisError as exc:
        raise _error(409, "refused", str(exc)) from exc


def _error(status: int, code: str, message: str, field: str | None = None) -> web.HTTPException:
    body = json.dumps({"error": {"code": code, "message": message, "field": field}})
    cls = {400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 403: web.HTTPForbidden,
           404: web.HTTPNotFound, 409: web.HTTPConflict}.get(status, web.HTTPServiceUnavailable)
    return cls(text=body, content_type="application/json")


async def _page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE_HTML, content_type="text/html")


async def _jobs(request: web.Request) -> web.Response:
    q = request.query
    states = tuple(s for s in q.get("state", "").split(",") if s)
    query = JobQuery(states=states, user=q.get("user") or None, prefix=q.get("prefix") or None,
                     sort=q.get("sort", "submitted"), descending=_order(q.get("order", "desc")),
                     page=_int(q, "page", 1), per_page=_int(q, "per_page", 50))
    return web.json_response(await request.app[_BACKEND].jobs(query))


async def _job(request: web.Request) -> web.Response:
    return web.json_response(await request.app[_BACKEND].job(_job_id(request.query.get("id"))))


async def _logs(request: web.Request) -> web.Response:
    tail = _int(request.query, "tail", 200)
    if not 1 <= tail <= MAX_LOG_TAIL:
        raise InvalidRequestError(f"tail: expected 1..{MAX_LOG_TAIL}, got {tail}", "tail")
    job_id = _job_id(request.query.get("id"))
    return web.json_response(await request.app[_BACKEND].log_tail(
        job_id, tail, **_log_filters(request.query)))


async def _logs_download(request: web.Request) -> web.Response:
    job_id = _job_id(request.query.get("id"))
    filters = _log_filters(request.query)
    text = await request.app[_BACKEND].log_text(job_id, **filters)
    name = job_id.strip("/").replace("/", "_") + (
        f"-task{filters['task']}" if filters["task"] is not None else "")
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={
        "Content-Disposition": f'attachment; filename="{name}.log"'})


def _log_filters(query) -> dict:
    task = query.get("task")
    return {"task": None if task in (None, "") else _int(query, "task", 0),
            "stream": query.get("stream") or None, "grep": query.get("grep") or None}


async def _kill(request: web.Request) -> web.Response:
    if request.headers.get(KILL_HEADER) != "1":
        raise _error(403, "forbidden", f"a kill needs the {KILL_HEADER}: 1 header (sent by the "
                     "dashboard page; refused cross-site)")
    try:
        body = await request.json()
    except ValueError as exc:
        raise InvalidRequestError("body: expected JSON like {\"job_id\": \"/u/job\"}",
                                  "body") from exc
    job_id = _job_id(body.get("job_id") if isinstance(body, dict) else None)
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), request.app[_WRITE_TOKEN].encode()) \
            or not given:
        raise _error(401, "unauthorized", "a kill needs the dashboard's token: open the "
                     "dashboard at the address printed when it started (…/?token=…)")
    _log.info("dashboard: kill %s from %s", job_id, request.remote)
    return web.json_response(await request.app[_BACKEND].kill(job_id))


async def _actors(request: web.Request) -> web.Response:
    prefix = request.query.get("prefix", "/")
    if not prefix.startswith("/"):
        raise InvalidRequestError(f"prefix: must start with '/', got {prefix!r}", "prefix")
    return web.json_response(await request.app[_BACKEND].actors(prefix))


async def _figures(request: web.Request) -> web.Response:
    raw = request.query.get("hours", "24")
    try:
        hours = float(raw)
    except ValueError:
        raise InvalidRequestError(f"hours: expected 1, 6 or 24, got {raw!r}", "hours") from None
    return web.json_response(await request.app[_BACKEND].figures(hours))


def _simple(name: str) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(await getattr(request.app[_BACKEND], name)())
    return handler


async def _metrics(request: web.Request) -> web.Response:
    text = await request.app[_BACKEND].metrics_text()
    return web.Response(body=text.encode(), headers={"Content-Type": metrics.CONTENT_TYPE})


def _job_id(value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise InvalidRequestError(f"job id: expected a job path like /alice/train, "
                                  f"got {value!r}", "id")
    return value


def _int(query: object, name: str, default: int) -> int:
    raw = query.get(name)  # type: ignore[attr-defined]
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequestError(f"{name}: expected an integer, got {raw!r}", name) from None


def _order(value: str) -> bool:
    if value not in ("asc", "desc"):
        raise InvalidRequestError(f"order: expected asc or desc, got {value!r}", "order")
    return value == "desc"
