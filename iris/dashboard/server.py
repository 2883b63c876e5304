"""Starting and stopping the dashboard: an aiohttp server on its own thread and event loop.

Not the routes (app.py). The server never runs on the node's loop nor on the controller's
actor thread: a slow page or a burst of browsers costs this thread, not scheduling. It talks
to the controller only through node calls (thread-safe) and reads the job store read-only.

aiohttp and the routes are imported at the first connection, not at the start: the port is
bound (as aiohttp's TCPSite binds it) and the history sampled from the start, and a
controller no one browses never pays aiohttp's import (~0.2 CPU-s; issue 33). The first
page waits for it once.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import secrets
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris.actors import Node
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import ConfigError
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
    try:
        socks = _listen(host, port)
    except OSError as exc:
        started["error"] = exc
        ready.set()
        return
    started["port"] = socks[0].getsockname()[1]
    ready.set()
    loop = asyncio.get_running_loop()
    sampler = asyncio.ensure_future(_sample(backend, stop))
    # The stop Event is set from any thread; one executor thread parks on it.
    stopped = loop.run_in_executor(None, stop.wait)
    first = asyncio.ensure_future(_first_connection(socks))
    runner = None
    try:
        await asyncio.wait({stopped, first}, return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():
            try:
                runner = await _serve_app(backend, token, write_token, socks)
            except Exception as exc:  # aiohttp missing or broken: say so, refuse browsers
                _log.error("dashboard: cannot serve its pages (%s: %s); it stays off until "
                           "the controller restarts", type(exc).__name__, exc)
                for sock in socks:
                    sock.close()
            await stopped
    finally:
        sampler.cancel()
        first.cancel()
        # Before the sockets close: the cancelled wait unregisters their descriptors as it
        # ends ("Invalid file descriptor: -1", logged at every unbrowsed stop, otherwise).
        await asyncio.gather(sampler, first, return_exceptions=True)
        if runner is not None:
            await runner.cleanup()
        for sock in socks:
            sock.close()


def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets as aiohttp's TCPSite makes them (asyncio's create_server): one per
    address `host` resolves to, SO_REUSEADDR, IPv6 sockets IPv6-only, backlog 128."""
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                               socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
            try:
                sock.bind(address)
            except OSError as exc:  # worded as asyncio words it
                raise OSError(exc.errno, f"error while attempting to bind on address "
                              f"{address!r}: {(exc.strerror or '').lower()}") from None
            sock.listen(128)
            sock.setblocking(False)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


async def _first_connection(socks: list[socket.socket]) -> None:
    """Returns once a client connects to any of `socks` (it waits in their backlog)."""
    loop = asyncio.get_running_loop()
    came = loop.create_future()
    for sock in socks:
        loop.add_reader(sock.fileno(), lambda: came.done() or came.set_result(None))
    try:
        await came
    finally:
        for sock in socks:
            loop.remove_reader(sock.fileno())


async def _serve_app(backend: Backend, token: str | None, write_token: str,
                     socks: list[socket.socket]) -> Any:
    """Serve the routes on the bound sockets; the runner, to clean up."""
    from aiohttp import web

    from iris.dashboard.app import build_app

    runner = web.AppRunner(build_app(backend, token, write_token), access_log=None)
    await runner.setup()
    for sock in socks:
        await web.SockSite(runner, sock).start()
    return runner


async def _sample(backend: Backend, stop: threading.Event) -> None:
    """The charts strip's points: one snapshot read every SAMPLE_EVERY_S while serving."""
    while not stop.is_set():
        try:
            await backend.sample()
        except Exception as exc:  # a controller that does not answer leaves a gap, no more
            _log.info("dashboard: no history sample: %s", exc)
        await asyncio.sleep(backend.history.every_s)
