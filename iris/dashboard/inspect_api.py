"""The dashboard's routes for looking inside a job (issue 31); added by app.build_app:

    GET  /api/job/summary?id=/alice/train          per task and attempt use, totals, series
    GET  /api/task/stack?id=/alice/train&task=0    every thread's stack of the task's processes
    GET  /api/task/profile?id=&task=0&seconds=5    a sampling profile (folded stacks)
    *    /proxy/JOB/TASK/PORT/...                  the task's named port (proxy.py)

The data comes from the controller (`job_summary`) and its inspector (`/iris/inspect`), the
same calls the CLI makes; not the page (page_inspect.py).
"""

from __future__ import annotations

from aiohttp import web

from iris.actors.keys import CONTROLLER_KEY, INSPECT_KEY
from iris.base.errors import InvalidRequestError
from iris.dashboard.proxy import Proxy
from iris.wire.control import MAX_PROFILE_S

# The dashboard's profiles are short looks from a page (a longer one: `iris task profile`).
MAX_PAGE_PROFILE_S = 60.0
_PROXY = web.AppKey("proxy", Proxy)


def add_routes(app: web.Application, backend) -> None:
    async def call(key: str, method: str, *args, timeout_s: float = 10.0):
        return await backend.node.call(backend.address, key, method, args,
                                       timeout_s=timeout_s)

    async def locate(job_id: str, task: int, port: str) -> dict:
        return await call(INSPECT_KEY, "task_url", {"job_id": job_id, "task_index": task,
                                                    "port": port})

    async def summary(request: web.Request) -> web.Response:
        return web.json_response(await call(CONTROLLER_KEY, "job_summary",
                                            _job(request.query.get("id"))))

    async def stack(request: web.Request) -> web.Response:
        ref = {"job_id": _job(request.query.get("id")), "task_index": _task(request)}
        return web.json_response(await call(INSPECT_KEY, "task_stack", ref, timeout_s=90.0))

    async def profile(request: web.Request) -> web.Response:
        seconds = _seconds(request.query.get("seconds", "5"))
        ref = {"job_id": _job(request.query.get("id")), "task_index": _task(request),
               "seconds": seconds}
        return web.json_response(await call(INSPECT_KEY, "task_profile", ref,
                                            timeout_s=seconds + 90.0))

    proxy = Proxy(locate)
    app[_PROXY] = proxy

    async def close(_app: web.Application) -> None:
        await proxy.close()

    app.on_cleanup.append(close)
    app.router.add_get("/api/job/summary", summary)
    app.router.add_get("/api/task/stack", stack)
    app.router.add_get("/api/task/profile", profile)
    app.router.add_route("*", "/proxy/{tail:.*}", proxy.handle)


def _job(value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise InvalidRequestError(f"id: expected a job path like /alice/train, got {value!r}",
                                  "id")
    return value


def _task(request: web.Request) -> int:
    raw = request.query.get("task", "0")
    if not raw.isdigit():
        raise InvalidRequestError(f"task: expected a task index, got {raw!r}", "task")
    return int(raw)


def _seconds(raw: str) -> float:
    try:
        seconds = float(raw)
    except ValueError:
        raise InvalidRequestError(f"seconds: expected a number, got {raw!r}",
                                  "seconds") from None
    limit = min(MAX_PAGE_PROFILE_S, MAX_PROFILE_S)
    if not 0 < seconds <= limit:
        raise InvalidRequestError(f"seconds: a profile from the page lasts more than 0 and at "
                                  f"most {limit:g} s (longer: iris task profile)", "seconds")
    return seconds
