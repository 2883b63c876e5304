"""Looking inside a running job from the dashboard: the job page's CPU and memory charts (the
request drawn as a line), a flame graph and stacks of the running task, and its named ports
through /proxy/JOB/TASK/PORT/ (HTTP and WebSocket; 502 where nothing listens; 404 naming a
port never asked for; the token rules of the dashboard). One cluster and one task for the
module: an aiohttp server that also burns CPU in a function with a known name."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import urllib.parse

import aiohttp
import pytest

import iris
from iris.actors.current import current_context
from iris.dashboard import start_dashboard
from tests.dashboard.conftest import CHROMIUM, SHOTS, WAIT_S, http, wait_until

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="Debian's chromium is not installed (scripts/test.sh installs it when root)")

# Run with the test's own interpreter (it has aiohttp): serves "/" (a page), "/echo" (a
# WebSocket echo) and "/seen" (the query and headers it was sent), holds 48 MiB, and burns
# about half a core in burn_in_a_known_function, so charts, stacks and profiles have
# something to show.
APP = textwrap.dedent("""
    import os, pathlib, sys, threading, time
    from aiohttp import web
    def burn_in_a_known_function():
        while True:
            end = time.monotonic() + 0.05
            while time.monotonic() < end:
                sum(range(1000))
            time.sleep(0.05)
    held = bytearray(48 << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    threading.Thread(target=burn_in_a_known_function, daemon=True).start()
    async def page(request):
        return web.Response(text="<h1 id='hello'>hello from the task</h1>",
                            content_type="text/html")
    async def seen(request):
        return web.json_response({"query": dict(request.query), "headers": dict(request.headers),
                                  "body": (await request.read()).decode()})
    async def echo(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            await ws.send_str("echo: " + msg.data)
        return ws
    app = web.Application(client_max_size=64 << 20)
    app.router.add_get("/", page)
    app.router.add_route("*", "/seen", seen)
    app.router.add_get("/echo", echo)
    async def main():
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", int(os.environ["IRIS_PORT_HTTP"])).start()
        pathlib.Path(sys.argv[1]).write_text("ready")
        await asyncio.Event().wait()
    import asyncio
    asyncio.run(main())
""")


class Inside:
    def __init__(self, ctx, handle, guarded, job):
        self.ctx, self.handle, self.guarded, self.job = ctx, handle, guarded, job

    def proxy(self, port: str = "http", rest: str = "", plain: bool = False) -> str:
        job = self.job.job_id.lstrip("/") if plain else urllib.parse.quote(self.job.job_id,
                                                                          safe="")
        return f"{self.handle.url}proxy/{job}/0/{port}/{rest}"


@pytest.fixture(scope="module")
def inside(tmp_path_factory):
    os.environ["IRIS_USAGE_INTERVAL_S"] = "0.5"  # the workers inherit it: readings often
    try:
        with iris.local_cluster(workers=1, worker_cpu=4, stop_grace_s=1.0,
                                state_dir=tmp_path_factory.mktemp("inside")) as ctx:
            token = current_context.set(ctx)
            handle = start_dashboard(ctx.node, ctx.address, port=0)
            guarded = start_dashboard(ctx.node, ctx.address, port=0, token="s3cret")
            try:
                ready = tmp_path_factory.mktemp("app") / "ready"
                job = iris.submit([sys.executable, "-c", APP, str(ready)], name="app",
                                  resources=iris.Resources(memory="512MiB",
                                                           ports=["http", "dead"]))
                wait_until(ready.exists, "the task's server to listen")
                yield Inside(ctx, handle, guarded, job)
                job.kill()
            finally:
                guarded.stop()
                handle.stop()
                current_context.reset(token)
    finally:
        os.environ.pop("IRIS_USAGE_INTERVAL_S", None)


def test_proxy_reaches_the_tasks_server_by_either_path_form_and_isolates_it(inside):
    status, body = http(inside.proxy())
    assert status == 200 and "hello from the task" in body
    assert http(inside.proxy(plain=True))[1] == body
    status, seen = http(inside.proxy(rest="seen?a=1&b=two"), data=b"posted", method="POST",
                        headers={"Content-Type": "text/plain"})
    assert status == 200
    assert seen["query"] == {"a": "1", "b": "two"} and seen["body"] == "posted"


def test_proxied_pages_run_in_a_sandbox_of_their_own(inside):
    import urllib.request

    with urllib.request.urlopen(inside.proxy(), timeout=30) as reply:
        assert reply.headers["Content-Security-Policy"].startswith("sandbox allow-scripts")
        assert "allow-same-origin" not in reply.headers["Content-Security-Policy"]


def test_proxy_carries_a_websocket_both_ways(inside):
    async def talk() -> list[str]:
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(inside.proxy(rest="echo")) as ws:
            got = []
            for word in ("one", "two"):
                await ws.send_str(word)
                got.append((await ws.receive(timeout=WAIT_S)).data)
            return got
    assert asyncio.run(talk()) == ["echo: one", "echo: two"]


def test_a_port_nothing_listens_on_is_a_502_page_naming_it(inside):
    status, body = http(inside.proxy("dead"))
    assert status == 502 and "Nothing listens there" in body
    assert "port &#x27;dead&#x27; of task 0 of " + inside.job.job_id in body


def test_an_unknown_job_task_or_port_is_a_404_naming_it(inside):
    status, body = http(inside.proxy("metrics"))
    assert status == 404 and "asked for no port named &#x27;metrics&#x27;" in body
    assert http(f"{inside.handle.url}proxy/nobody/nothing/0/http/")[0] == 404
    status, body = http(inside.proxy().replace("/0/http/", "/7/http/"))
    assert status == 404 and "has no task 7" in body


def test_a_dashboard_with_a_token_guards_the_proxy_and_never_passes_the_token_on(inside):
    url = inside.proxy(rest="seen").replace(inside.handle.url, inside.guarded.url)
    assert http(url)[0] == 401
    opener = _no_redirects()
    first = opener.open_status(url + "?token=s3cret&x=1")
    assert first[0] == 303 and "token" not in first[1]["Location"]
    cookie = first[1]["Set-Cookie"]
    assert "Path=/proxy/" in cookie and "HttpOnly" in cookie
    status, seen = http(url + "?x=1", headers={"Cookie": cookie.split(";")[0]})
    assert status == 200 and seen["query"] == {"x": "1"}
    assert "s3cret" not in json.dumps(seen)  # neither query, header nor cookie
    assert http(url + "?x=1", headers={"Cookie": "iris_proxy_token=wrong"})[0] == 401


def _no_redirects():
    import urllib.request

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(Keep)

    def open_status(url: str):
        try:
            with opener.open(url, timeout=30) as reply:
                return reply.status, reply.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers
    opener.open_status = open_status
    return opener


# ------------------------------------------------------------ in the browser


def _job_page(inside, page) -> None:
    page.goto(f"{inside.handle.url}#/job/{urllib.parse.quote(inside.job.job_id, safe='')}")


@needs_chromium
def test_job_page_draws_cpu_and_memory_over_time_with_the_request(inside, page):
    _job_page(inside, page)
    page.wait_for_function("document.querySelectorAll('#mem-chart-0 polyline')[0]"
                           " && document.querySelector('#mem-chart-0 polyline')"
                           ".getAttribute('points').split(' ').length >= 3")
    assert page.locator("#mem-chart-0 line.request").count() == 1  # the 512 MiB asked
    assert page.locator("#cpu-chart-0 line.request").count() == 1  # the 1 CPU asked
    assert "asked 512 MiB" in page.locator("#charts-task-0").inner_text()
    row = page.locator("tr.usage-row").first.inner_text()
    assert "of 512 MiB" in row and "running" in row
    _shot(page, "usage-charts")


@needs_chromium
def test_profile_button_draws_a_flame_graph_with_the_hot_function(inside, page):
    _job_page(inside, page)
    page.click("#profile-btn-0")
    page.locator("#flame .flame-frame", has_text="burn_in_a_known_function").first.wait_for()
    assert "samples" in page.locator("#profile-note").inner_text()
    _shot(page, "flame-graph")
    page.click("#stack-btn-0")
    page.locator("pre.stack-out", has_text="burn_in_a_known_function").first.wait_for()


@needs_chromium
def test_a_port_link_opens_the_tasks_page_and_a_dead_port_a_clear_error(inside, page):
    _job_page(inside, page)
    with page.context.expect_page() as opened:
        page.click("#port-0-http")
    proxied = opened.value
    proxied.locator("#hello", has_text="hello from the task").wait_for()
    _shot(proxied, "proxied-page")
    proxied.goto(inside.proxy("dead"))
    assert "502" in proxied.locator("#proxy-error").inner_text()
    assert "dead" in proxied.locator("#proxy-message").inner_text()
    _shot(proxied, "proxy-502")


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_large_upload_is_streamed_through_the_proxy(inside):
    body = b"z" * (3 << 20)  # above aiohttp's 1 MiB default for a body read whole
    status, seen = http(inside.proxy(rest="seen"), data=body, method="PUT",
                        headers={"Content-Type": "application/octet-stream"})
    assert status == 200 and len(seen["body"]) == len(body)
