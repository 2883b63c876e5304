"""A fake GCE metadata server for tests: instance/preempted and instance/maintenance-event.

Not a full metadata server: the two keys a worker watches (plus instance/id and hostname,
which clients use to detect GCE), answered as GCE answers them: plain text, an ETag header,
`Metadata-Flavor: Google`, a 403 without the request header, and `?wait_for_change=true`
GETs that hang until the value changes from `last_etag` (or `timeout_sec` passes). Runs
aiohttp on its own loop in a background thread, on 127.0.0.1 port 0; point a worker at it
with GCE_METADATA_HOST=`host` (host:port, as google-auth reads it).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field

from aiohttp import web

from tests.providers.fake_http import FakeHttpServer


@dataclass
class FakeMetadataServer(FakeHttpServer):
    """Start with `with FakeMetadataServer() as m:`; `m.raise_preemption()` gives notice."""

    values: dict[str, str] = field(default_factory=lambda: {
        "preempted": "FALSE", "maintenance-event": "NONE", "id": "4242", "hostname": "fake"})
    # (key, wait_for_change) of every GET, in order, so a test can wait for a watcher.
    gets: list[tuple[str, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Condition()
        self._closing = False

    # --- test controls -------------------------------------------------------------------
    def set_value(self, key: str, value: str) -> None:
        """Change a key as GCE would; hanging GETs on it answer at once."""
        with self._lock:
            self.values[key] = value
        self._loop.call_soon_threadsafe(self._wake)

    def raise_preemption(self) -> None:
        self.set_value("preempted", "TRUE")

    def raise_maintenance(self, event: str = "TERMINATE_ON_HOST_MAINTENANCE") -> None:
        self.set_value("maintenance-event", event)

    def wait_for_watchers(self, key: str, count: int = 1, timeout: float = 60.0) -> None:
        """Block until `count` hanging GETs on `key` have arrived (a watcher is waiting)."""
        with self._lock:
            if not self._lock.wait_for(lambda: sum(1 for k, w in self.gets
                                                   if k == key and w) >= count, timeout):
                raise TimeoutError(f"no hanging GET on {key} within {timeout} s")

    # --- lifecycle -----------------------------------------------------------------------
    _name = "fake metadata server"
    _shutdown_s = 0.1

    def _before_close(self) -> None:
        self._closing = True  # hanging GETs answer now, so none is left pending at close
        self._loop.call_soon_threadsafe(self._wake)

    def _app(self) -> web.Application:
        self._changed = asyncio.Event()
        app = web.Application()
        app.router.add_get("/computeMetadata/v1/instance/{key}", self._get)
        return app

    @property
    def host(self) -> str:
        """"127.0.0.1:PORT", for GCE_METADATA_HOST."""
        return f"127.0.0.1:{self.port}"

    def _wake(self) -> None:  # on the loop: release every hanging GET to look again
        self._changed.set()
        self._changed = asyncio.Event()

    def _current(self, key: str) -> tuple[str, str] | None:
        with self._lock:
            value = self.values.get(key)
        if value is None:
            return None
        return value, hashlib.sha1(f"{key}={value}".encode()).hexdigest()[:16]

    async def _get(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.")
        key = request.match_info["key"]
        wait = request.query.get("wait_for_change") == "true"
        with self._lock:
            self.gets.append((key, wait))
            self._lock.notify_all()
        found = self._current(key)
        if found is None:
            return web.Response(status=404, text="not found")
        last = request.query.get("last_etag")
        timeout = float(request.query.get("timeout_sec") or 3600)
        while wait and found[1] == last and not self._closing:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                break
            found = self._current(key)
        value, etag = found
        return web.Response(text=value, headers={"ETag": etag, "Metadata-Flavor": "Google"})
