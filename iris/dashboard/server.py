"""Starting and stopping the dashboard: an aiohttp server on its own thread and event loop.

Not the routes (app.py). The server never runs on the node's loop nor on the controller's
actor thread: a slow page or a burst of browsers costs this thread, not scheduling. It talks
to the controller only through node calls (thread-safe) and reads the job store read-only.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from iris.actors import Node
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import ConfigError
from iris.dashboard.app import build_app
from iris.dashboard.backend import Backend

_log = logging.getLogger(__name__)
DEFAULT_PORT = 8265
"""Ray's dashboard port: the users this replaces already type it; 0 picks a free one."""
DEFAULT_HOST = "127.0.0.1"
"""Loopback unless told otherwise: the dashboard can kill jobs."""
_START_TIMEOUT_S = 30.0


class PortInUseError(ConfigError):
    """Another process listens on the dashboard's port."""


@dataclass(frozen=True)
class DashboardHandle:
    """A running dashboard. `url` includes no token; `login_url` carries the token that
    writes (kills) need; `note` says why it is not where asked (a taken default port);
    `stop()` is idempotent."""

    url: str
    host: str
    port: int
    _stop: threading.Event
    _thread: threading.Thread
    write_token: str = ""
    note: str = ""

    @property
    def login_url(self) -> str:
        return f"{self.url}?token={self.write_token}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(_START_TIMEOUT_S)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def start_dashboard(node: Node, address: str, state_dir: str | Path | None = None, *,
                    host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                    token: str | None = None,
                    scale_groups: list[dict] | None = None) -> DashboardHandle:
    """Serve the dashboard for the cluster whose controller and registry are at `address`,
    calling them through `node`; `state_dir` is the controller's (it holds jobs.sqlite3;
    None: ask the controller, which must then be up).

    Off loopback a `token` is required (ConfigError otherwise, before anything listens).
    `scale_groups`: plain dicts from the cluster config for the capacity page.
    Returns once the server listens; raises if it cannot bind.
    """
    if not is_loopback(host) and not token:
        raise ConfigError(f"dashboard host {host!r} is not loopback: pass a token "
                          "(IRIS_DASHBOARD_TOKEN for the CLI) so strangers cannot "
                          "kill jobs")
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"dashboard port: expected 0..65535, got {port!r}")
    if state_dir is None:
        state_dir = node.call(address, CONTROLLER_KEY, "state_dir",
                              timeout_s=_START_TIMEOUT_S).result(_START_TIMEOUT_S)
    backend = Backend(node, address, state_dir, scale_groups)
    # Writes need a token on any address (a local process must not kill jobs by sending a
    # header): the operator's, or one made now and shown only in the address printed.
    write_token = token or secrets.token_urlsafe(16)
    stop = threading.Event()
    started: dict = {}
    ready = threading.Event()
    thread = threading.Thread(target=_serve, name="iris-dashboard", daemon=True,
                              args=(backend, token, write_token, host, port, stop, started,
                                    ready))
    thread.start()
    if not ready.wait(_START_TIMEOUT_S) or "error" in started:
        stop.set()
        thread.join(_START_TIMEOUT_S)
        error = started.get("error")
        in_use = isinstance(error, OSError) and error.errno == errno.EADDRINUSE
        raise (PortInUseError if in_use else ConfigError)(f"dashboard could not listen on {host}:{port}: {error}") from error
    bound = started["port"]
    shown = f"[{host}]" if ":" in host else host
    return DashboardHandle(f"http://{shown}:{bound}/", host, bound, stop, thread, write_token)


def _serve(backend: Backend, token: str | None, write_token: str, host: str, port: int,
           stop: threading.Event, started: dict, ready: threading.Event) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_run(backend, token, write_token, host, port, stop, started,
                                     ready))
    finally:
        backend.close()
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


async def _run(backend: Backend, token: str | None, write_token: str, host: str, port: int,
               stop: threading.Event, started: dict, ready: threading.Event) -> None:
    runner = web.AppRunner(build_app(backend, token, write_token), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            started["error"] = exc
            ready.set()
            return
        started["port"] = runner.addresses[0][1]
        ready.set()
        sampler = asyncio.ensure_future(_sample(backend, stop))
        # The stop Event is set from any thread; one executor thread parks on it.
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        sampler.cancel()
    finally:
        await runner.cleanup()


async def _sample(backend: Backend, stop: threading.Event) -> None:
    """The charts strip's points: one snapshot read every SAMPLE_EVERY_S while serving."""
    while not stop.is_set():
        try:
            await backend.sample()
        except Exception as exc:  # a controller that does not answer leaves a gap, no more
            _log.info("dashboard: no history sample: %s", exc)
        await asyncio.sleep(backend.history.every_s)
